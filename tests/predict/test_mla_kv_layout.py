"""Each engine's FP8 MLA cache entry (DeepSeek-R1: 61 layers, 512 latent + 64 rope dims): vLLM's FlashMLA
layout (the model spec's default) 512 fp8 + 16 bytes of scales + 64 x 2 bf16 rope = 656 bytes a token a
layer; SGLang and TensorRT-LLM keep latent and rope key in fp8, 512 + 64 = 576."""

import pytest

from servelab.errors import ServelabError
from servelab.predict.engines import engine_profile
from servelab.predict.memory import GIB, memory_per_gpu
from servelab.predict.serving import Workload, estimate_aggregated
from servelab.predict.static import estimate_static
from servelab.specs import MlaFp8KvLayout, Parallel, load_model, load_system
from servelab.specs.attention import LayerAttention

H200 = load_system("h200_sxm")
R1_TP8 = Parallel(tp=8, ep=8)


def test_fp8_entry_bytes_by_layout():
    r1 = load_model("deepseek-r1", kv_dtype="fp8")
    assert r1.kv_bytes_per_layer(LayerAttention.full, 1) == 512 + 16 + 64 * 2
    fp8 = r1.with_mla_fp8_kv_layout(MlaFp8KvLayout.fp8)
    assert fp8.kv_bytes_per_layer(LayerAttention.full, 10) == 10 * (512 + 64)
    assert fp8.kv_bytes_per_token == 61 * 576
    # a bf16 cache is 576 bf16 values in every engine; a model without MLA is left as it is
    bf16 = load_model("deepseek-r1", kv_dtype="bf16")
    assert bf16.with_mla_fp8_kv_layout(MlaFp8KvLayout.fp8).kv_bytes_per_token == 61 * 576 * 2
    llama = load_model("llama-3.1-8b", kv_dtype="fp8")
    assert llama.with_mla_fp8_kv_layout(MlaFp8KvLayout.fp8) is llama


@pytest.mark.parametrize(
    ("engine", "per_layer"), [("vllm", 576), ("sglang", 576), ("trtllm", 576), ("torch", 656)]
)
def test_each_engine_serves_its_own_layout(engine, per_layer):
    r1 = load_model("deepseek-r1", kv_dtype="fp8")
    served = engine_profile(engine).model_as_served(r1)
    assert served.kv_bytes_per_token == 61 * per_layer
    mem = memory_per_gpu(served, H200, R1_TP8, fraction_of_free=True)
    assert mem.kv_bytes_per_token == 61 * per_layer  # one latent head per rank: not split by tp
    assert mem.max_kv_tokens == int(mem.kv_gib * GIB // (61 * per_layer))


def test_trtllm_holds_128_clients_of_9216_tokens_at_a_free_fraction_of_0_75():
    """A TensorRT-LLM recipe row (DeepSeek-R1 tp8-ep8, 1024/8192, 128 clients, free_gpu_memory_fraction
    0.75; TTFT 1.4 s measured): its 42.1 GiB of KV per GPU hold 1.29 M tokens at 576 bytes a layer, enough for
    the 128 x 9216 = 1.18 M its clients need, so under no-evict admission none waits for another to finish
    (at 656 bytes 1.13 M tokens fit: 6 requests waited whole lifetimes)."""
    r1 = load_model("deepseek-r1", kv_dtype="fp8")
    engine = engine_profile("trtllm", H200.hbm_gib)
    wl = Workload(isl=1024, osl=8192, concurrency=128, warmup=0, num_requests=128, range_ratio=0.0)
    r = estimate_aggregated(
        r1, H200, R1_TP8, engine, 128, 1024, 8192, workload=wl, gpu_memory_utilization=0.75
    )
    assert r.memory["max_kv_tokens"] >= 128 * 9216
    assert r.percentiles["ttft_ms"]["p99"] < 0.1 * 8192 * r.tpot_ms


def test_static_estimate_counts_the_engine_layout():
    """At TensorRT-LLM's default free fraction (0.9) 50.5 GiB of KV per GPU hold 167 sequences of 9216 tokens
    at 576 bytes a layer, 147 at the model's 656 (FlashMLA's layout): a batch of 160 fits TensorRT-LLM's and
    not a FlashMLA-sized cache."""
    r1 = load_model("deepseek-r1", kv_dtype="fp8")
    trt = engine_profile("trtllm", H200.hbm_gib)
    estimate_static(r1, H200, R1_TP8, trt, 160, 1024, 8192)
    with pytest.raises(ServelabError, match="at most 147 sequences"):
        estimate_static(r1, H200, R1_TP8, trt.model_copy(update={"mla_fp8_kv_layout": None}), 160, 1024, 8192)
