"""The roofline's MXFP4 experts under vLLM: multiplied at MXFP8's FP8 rate on a GPU with FP4 tensor cores
(vLLM has no FP4 x FP4 kernel for them on NVIDIA), at the BF16 rate on Hopper (Marlin W4A16), and at the FP4
rate for the other engines, whose kernels the rule does not speak for."""

import pytest

from servelab.perfdb.keys import Moe
from servelab.perfdb.roofline import Roofline
from servelab.specs import load_system

B200, H100 = load_system("b200_sxm"), load_system("h100_sxm")
# gpt-oss-120b's experts at TP1: a prefill of 8,192 tokens (compute-bound) and a decode of 4 (weight-bound)
PREFILL = Moe(tokens=8192, hidden=2880, inter=2880, experts=128, topk=4, ep=1, dtype="mxfp4")
DECODE = PREFILL._replace(tokens=4)


def test_vllm_prices_blackwell_mxfp4_experts_at_the_fp8_rate():
    vllm, trtllm = Roofline(B200, backend="vllm"), Roofline(B200, backend="trtllm")
    flops = 2.0 * 3 * PREFILL.tokens * PREFILL.topk * PREFILL.hidden * PREFILL.inter
    fp8_rate = B200.peak_tflops["fp8"] * 1e12 * vllm.eff.gemm_compute["fp8"]
    assert vllm.latency(PREFILL).us == pytest.approx(
        flops / fp8_rate * 1e6 + 3 * vllm.kernel_us
    )  # compute-bound at FP8
    assert trtllm.latency(PREFILL).us < vllm.latency(PREFILL).us / 1.5  # FP4's rate: bound by its bytes
    assert vllm.latency(DECODE).us == trtllm.latency(DECODE).us  # bound by the weights' bytes either way


def test_hopper_and_other_dtypes_are_untouched():
    assert (
        Roofline(H100, backend="vllm").latency(PREFILL).us
        == Roofline(H100, backend="trtllm").latency(PREFILL).us
    )
    nvfp4 = PREFILL._replace(dtype="nvfp4")
    assert (
        Roofline(B200, backend="vllm").latency(nvfp4).us == Roofline(B200, backend="trtllm").latency(nvfp4).us
    )
