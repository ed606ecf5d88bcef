"""Which GPU model runner vLLM gives a model by release (V1, v1/worker/gpu_model_runner.py, or V2,
v1/worker/gpu/model_runner.py), whether it subtracts CUDA graph memory from the KV cache, and the batch sizes
it captures graphs for. Read in vLLM's sdists of 0.19.0-0.24.0 and the 0.25.0 wheel (config/vllm.py, envs.py,
v1/worker/gpu_worker.py); each rule cites its function."""

from typing import Literal

from servelab.engines.version import Version, numbered_release
from servelab.specs import ModelSpec
from servelab.specs.dtypes import Dtype

Runner = Literal["v1", "v2"]

# config/vllm.py DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, by the first release that has the set (none before
# 0.22.0: envs.py VLLM_USE_V2_MODEL_RUNNER defaults to "0" in 0.19.0-0.21.0, so every model runs on V1)
V2_ARCHITECTURES: tuple[tuple[str, frozenset[str]], ...] = (
    ("0.25.0", frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"})),
    (
        "0.24.0",
        frozenset(
            {
                "Qwen3ForCausalLM",
                "DeepseekV2ForCausalLM",
                "Qwen2MoeForCausalLM",
                "GraniteMoeForCausalLM",
                "LlamaForCausalLM",
                "MistralForCausalLM",
            }
        ),
    ),
    ("0.23.0", frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"})),
    ("0.22.0", frozenset({"Qwen3ForCausalLM"})),
)
CUDAGRAPH_ESTIMATE_FROM = Version("0.20.0")  # envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS: "0" in 0.19.0
SIXTEEN_BIT = (Dtype.bf16, Dtype.fp16)


def _release(version: str | None) -> Version:
    """A release not named by number (None, latest, a nightly) takes the newest read, as batch.py does."""
    return numbered_release(version) or Version(V2_ARCHITECTURES[0][0])


def model_runner(model: ModelSpec, version: str | None = None) -> Runner:
    """config/vllm.py VllmConfig.use_v2_model_runner and _is_default_v2_model_runner_model at the defaults
    (no VLLM_USE_V2_MODEL_RUNNER, no unsupported feature): from 0.25.0 V2 for every dense model and the
    listed MoE architectures; 0.24.0 the listed architectures only; 0.22.0 and 0.23.0 the listed
    architectures when neither MoE nor quantized; V1 before 0.22.0."""
    release = _release(version)
    listed = next((archs for first, archs in V2_ARCHITECTURES if release >= Version(first)), None)
    if listed is None:
        return "v1"
    is_listed = model.architecture in listed
    if release >= Version("0.25.0"):
        return "v2" if is_listed or not model.is_moe else "v1"
    if release >= Version("0.24.0"):
        return "v2" if is_listed else "v1"
    quantized = model.precision.weights not in SIXTEEN_BIT or model.precision.experts not in SIXTEEN_BIT
    return "v2" if is_listed and not model.is_moe and not quantized else "v1"


def subtracts_cudagraph_memory(model: ModelSpec, version: str | None = None) -> bool:
    """v1/worker/gpu_worker.py Worker.determine_available_memory subtracts the runner's
    profile_cudagraph_memory when VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is on (from 0.20.0); the V2 runner
    answers 0 (it captures after the KV cache is sized), so only the V1 runner's estimate counts."""
    return _release(version) >= CUDAGRAPH_ESTIMATE_FROM and model_runner(model, version) == "v1"


def _capture_bound(max_num_seqs: int, max_num_batched_tokens: int, max_capture_size: int | None) -> int:
    """The bound the capture sizes run up to: the launch's max_cudagraph_capture_size where one is set
    (max_capture_size), else min(2 x max_num_seqs, 512), never over max_num_batched_tokens."""
    return min(max_capture_size or min(2 * max_num_seqs, 512), max_num_batched_tokens)


def largest_cudagraph_size(
    max_num_seqs: int, max_num_batched_tokens: int, max_capture_size: int | None = None
) -> int:
    """The largest step, in tokens, a CUDA graph is captured for: cudagraph_capture_sizes(...)[-1] without
    the list. A bound off the sizes' grid is not a size itself (1,000 captures up to 992), as vLLM truncates
    max_cudagraph_capture_size to the last size (config/vllm.py _set_cudagraph_sizes, 0.25.0)."""
    bound = _capture_bound(max_num_seqs, max_num_batched_tokens, max_capture_size)
    if max_num_batched_tokens <= bound:
        return max_num_batched_tokens
    if bound >= 256:
        return bound - (bound - 256) % 16
    if bound >= 8:
        return bound - bound % 8
    return max(s for s in (1, 2, 4) if s <= bound)


def cudagraph_capture_sizes(
    max_num_seqs: int, max_num_batched_tokens: int, max_capture_size: int | None = None
) -> list[int]:
    """config/vllm.py VllmConfig._set_cudagraph_sizes (0.25.0, the default 'balanced' performance mode, no
    speculative tokens): 1, 2, 4, then every 8 below 256, then every 16 up to the bound (_capture_bound), and
    max_num_batched_tokens when it fits."""
    largest = _capture_bound(max_num_seqs, max_num_batched_tokens, max_capture_size)
    sizes = {s for s in (1, 2, 4) if s <= largest}
    sizes.update(range(8, min(largest + 1, 256), 8))
    sizes.update(range(256, largest + 1, 16))
    if max_num_batched_tokens <= largest:
        sizes.add(max_num_batched_tokens)
    return sorted(sizes)


def cudagraph_count(
    max_num_seqs: int, max_num_batched_tokens: int, max_capture_size: int | None = None
) -> int:
    """Graphs the default FULL_AND_PIECEWISE mode captures (v1/cudagraph_dispatcher.py
    CudagraphDispatcher.initialize_cudagraph_keys, 0.25.0): a PIECEWISE graph for every capture size, and a
    FULL graph for each size a uniform decode batch can take, up to max_num_seqs (one token a request, no
    speculative tokens). At vLLM's default 1,024 sequences every size is both: 51 + 51; at 48, the sizes run
    up to 96 and FULL stops at 48: 15 + 9."""
    sizes = cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens, max_capture_size)
    return len(sizes) + sum(1 for s in sizes if s <= max_num_seqs)


__all__ = [
    "Runner",
    "cudagraph_capture_sizes",
    "cudagraph_count",
    "largest_cudagraph_size",
    "model_runner",
    "subtracts_cudagraph_memory",
]
