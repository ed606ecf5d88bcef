"""The DeepSeek-V4 lightning indexer's prefill as the engines run it: fp32 logits written to HBM and read back
by a top-k pass, and a ReLU-weighted sum over the 64 indexer heads on the CUDA cores, which Hopper's kernel
runs after its tensor-core work and Blackwell's alongside it."""

import pytest

from servelab.perfdb.keys import Dsv4Context, Dsv4Generation
from servelab.perfdb.roofline import Roofline
from servelab.specs import load_system

H200 = load_system("h200_sxm")
SEQ = 262_144
CSA = Dsv4Context(64, 64, 1, SEQ, "dsv4_csa_context_module")
LOGITS = SEQ * (SEQ / 4) / 2  # each query scores the compressed entries (one per 4 tokens) before it


def _us(system, key=CSA) -> float:
    return Roofline(system).latency(key).us


def test_the_top_k_pass_reads_every_logit_from_hbm():
    """Halving the HBM bandwidth leaves the (compute-bound) scores and attention as they are, but the top-k
    pass reads the logits at half the speed: at least one read of them at the halved peak more."""
    slow = H200.model_copy(update={"hbm_bw_tbs": H200.hbm_bw_tbs / 2})
    one_read_us = LOGITS * 4 / (H200.hbm_bw_tbs * 1e12) * 1e6
    assert _us(slow) - _us(H200) >= one_read_us


def test_hopper_pays_the_head_sum_after_the_tensor_cores():
    """The same GPU with Blackwell's overlapped epilogue is faster by at least the epilogue itself: two FP32
    instructions (ReLU, multiply-add) per indexer head per logit at the datasheet FP32 rate (67 TFLOPS,
    an FMA counted as two flops)."""
    overlapped = H200.model_copy(update={"compute_capability": 100})
    epilogue_us = LOGITS * 64 * 2 / (67e12 / 2) * 1e6
    assert _us(H200) - _us(overlapped) >= epilogue_us


def test_hca_has_no_indexer():
    """HCA attends densely over its 128:1 entries: neither rule touches it (compute-bound at this length)."""
    hca = CSA._replace(op="dsv4_hca_context_module")
    slow = H200.model_copy(update={"hbm_bw_tbs": H200.hbm_bw_tbs / 2})
    overlapped = H200.model_copy(update={"compute_capability": 100})
    assert _us(overlapped, hca) == pytest.approx(_us(H200, hca))
    assert _us(slow, hca) == pytest.approx(_us(H200, hca))


@pytest.mark.parametrize(
    ("native", "heads", "kernel"),
    [(64, 8, 64), (64, 16, 64), (128, 16, 64), (128, 32, 64), (128, 128, 128)],
)
def test_attention_modules_run_64_or_128_query_heads(native, heads, kernel):
    """The engines' DeepSeek-V4 kernels pad a rank's query heads to 64 or 128: a TP8 rank of V4-Flash (8
    heads) costs what a rank with all 64 does, in prefill and in decode."""
    r = Roofline(H200)
    rank_keys = [
        Dsv4Context(native, heads, 1, 65_536, "dsv4_csa_context_module"),
        Dsv4Context(native, heads, 1, 65_536, "dsv4_hca_context_module"),
        Dsv4Generation(native, heads, 32, 65_536, "dsv4_csa_generation_module"),
        Dsv4Generation(native, heads, 32, 65_536, "dsv4_hca_generation_module"),
    ]
    for key in rank_keys:
        assert r.latency(key).us == pytest.approx(r.latency(key._replace(heads=kernel)).us), key


def test_128_heads_cost_more_than_64():
    r = Roofline(H200)
    pro = Dsv4Context(128, 128, 1, 65_536, "dsv4_hca_context_module")
    assert r.latency(pro).us > 1.5 * r.latency(pro._replace(heads=64)).us
