"""vLLM's model runner by model and release (config/vllm.py use_v2_model_runner, read in the 0.19.0-0.24.0
sdists and the 0.25.0 wheel), whether its CUDA graph estimate is subtracted, and the sizes it captures."""

import pytest

from servelab.engines.vllm.runner import (
    cudagraph_capture_sizes,
    cudagraph_count,
    largest_cudagraph_size,
    model_runner,
    subtracts_cudagraph_memory,
)
from servelab.specs import load_model

LLAMA = load_model("llama-3.1-8b")  # LlamaForCausalLM, dense
QWEN3 = load_model("qwen3-32b")  # Qwen3ForCausalLM, dense
QWEN3_MOE = load_model("qwen3-30b-a3b")  # Qwen3MoeForCausalLM: not on any release's V2 list
DEEPSEEK = load_model("deepseek-r1")  # DeepseekV3ForCausalLM, block-FP8
LLAMA_FP8 = load_model("llama-3.1-8b", weight_dtype="fp8")
GEMMA = LLAMA.model_copy(update={"architecture": "Gemma2ForCausalLM"})  # dense, never listed
QWEN2_MOE = QWEN3_MOE.model_copy(update={"architecture": "Qwen2MoeForCausalLM"})  # a listed MoE


@pytest.mark.parametrize(
    ("model", "release", "runner"),
    [
        (LLAMA, "0.21.0", "v1"),  # VLLM_USE_V2_MODEL_RUNNER defaults to 0 before 0.22.0
        (QWEN3, "0.21.0", "v1"),
        (QWEN3, "0.22.0", "v2"),  # 0.22.0 lists Qwen3ForCausalLM only
        (LLAMA, "0.22.0", "v1"),
        (LLAMA, "0.23.0", "v2"),  # 0.23.0 adds Llama and Mistral
        (LLAMA_FP8, "0.23.0", "v1"),  # listed but quantized
        (QWEN2_MOE, "0.23.0", "v1"),  # MoE excluded in 0.22.0 and 0.23.0
        (LLAMA_FP8, "0.24.0", "v2"),  # 0.24.0: the list alone decides
        (QWEN2_MOE, "0.24.0", "v2"),
        (GEMMA, "0.24.0", "v1"),
        (GEMMA, "0.25.0", "v2"),  # 0.25.0: every dense model
        (QWEN2_MOE, "0.25.0", "v2"),
        (QWEN3_MOE, "0.25.0", "v1"),  # other MoE: V1
        (DEEPSEEK, "0.25.0", "v1"),
        (QWEN3_MOE, None, "v1"),  # a release not named by number: the newest read
        (LLAMA, "vllm/vllm-openai:v0.25.0", "v2"),
    ],
)
def test_the_runner_follows_the_architecture_and_release(model, release, runner):
    assert model_runner(model, release) == runner


def test_cuda_graph_memory_is_subtracted_from_0_20_0_and_only_under_the_v1_runner():
    assert not subtracts_cudagraph_memory(LLAMA, "0.19.0")  # the estimate's switch was off
    assert subtracts_cudagraph_memory(LLAMA, "0.20.0")  # on, and every model ran V1
    assert not subtracts_cudagraph_memory(LLAMA, "0.25.0")  # V2 captures after sizing the cache
    assert subtracts_cudagraph_memory(QWEN3_MOE, "0.25.0")
    assert not subtracts_cudagraph_memory(QWEN2_MOE, "0.25.0")


def test_capture_sizes_follow_the_sequence_cap_and_token_budget():
    """_set_cudagraph_sizes: 1, 2, 4, every 8 below 256, every 16 up to min(2 x max_num_seqs, 512); the
    H100's defaults (1,024 sequences, 8,192 tokens) give the 51 sizes up to 512 that vLLM's log names."""
    sizes = cudagraph_capture_sizes(1024, 8192)
    assert (len(sizes), sizes[:5], sizes[-2:]) == (51, [1, 2, 4, 8, 16], [496, 512])
    assert cudagraph_capture_sizes(16, 8192) == [1, 2, 4, 8, 16, 24, 32]
    assert cudagraph_capture_sizes(1024, 100)[-3:] == [88, 96, 100]  # the budget itself is captured


def test_graph_count_follows_the_servers_sequence_cap_and_capture_size():
    """A worked example (vLLM 0.25.0 by its source: config/vllm.py _set_cudagraph_sizes and
    v1/cudagraph_dispatcher.py initialize_cudagraph_keys). At 48 sequences and 2,048 tokens the sizes stop at
    2 x 48 = 96 (15 PIECEWISE) and the FULL decode graphs at 48 (9): 24 graphs, what the seventeenth
    session's server logged ("PIECEWISE=15 (largest=96), FULL=9 (largest=48)",
    tests/data/vllm_gpu_heldout17/server_start.log). At the default 1,024 every one of the 51 sizes is both.
    A launch's max_cudagraph_capture_size of 2,048 at 512 sequences: 147 sizes, 51 of them FULL."""
    sizes = cudagraph_capture_sizes(48, 2048)
    assert sizes == [1, 2, 4, *range(8, 97, 8)]
    assert cudagraph_count(48, 2048) == 15 + 9
    assert cudagraph_count(1024, 2048) == cudagraph_count(1024, 8192) == 51 + 51
    with_capture_size = cudagraph_capture_sizes(512, 8192, 2048)
    assert (len(with_capture_size), with_capture_size[-1]) == (147, 2048)
    assert cudagraph_count(512, 8192, 2048) == 147 + 51
    assert cudagraph_capture_sizes(512, 1024, 2048)[-1] == 1024  # the token budget caps a size set too


def test_the_largest_graph_size_is_the_last_captured_size_without_the_list():
    """A bound off the capture sizes' grid is not captured itself: vLLM truncates it to the last size
    (a capture size of 1,000 captures up to 992; 2 x 250 sequences up to 496, then 256 sequences 512)."""
    assert largest_cudagraph_size(1024, 8192, 1000) == 992
    assert largest_cudagraph_size(250, 8192) == 496
    for seqs in (1, 2, 3, 5, 7, 13, 48, 127, 250, 256, 1024):
        for tokens in (1, 3, 6, 100, 300, 511, 2048, 8192):
            for capture in (None, 1, 5, 100, 1000, 2048):
                assert (
                    largest_cudagraph_size(seqs, tokens, capture)
                    == cudagraph_capture_sizes(seqs, tokens, capture)[-1]
                )
