"""The MoE router GEMM in the format the engine runs it: vLLM keeps MiniMax-M2's gate in float32 at every
token count (a specialised float32 kernel up to 32 tokens, cuBLAS SGEMM above, vLLM 0.32.0 gate_linear.py; a
float32 ReplicatedLinear in 0.19.0), so its router is priced on the CUDA cores' float32 roofline; other
models and other engines keep bf16."""

from pathlib import Path

import pytest

from servelab.engines import Engine, router_dtype
from servelab.perfdb.db import PerfDB
from servelab.perfdb.keys import Gemm
from servelab.perfdb.roofline import FP32_LANES_PER_SM, SM_CLOCK_HZ, Roofline
from servelab.predict.engines import engine_profile
from servelab.predict.graph import StepShape, step_ops
from servelab.specs import Dtype, Parallel, load_model, load_system

MINIMAX = Path(__file__).resolve().parents[1] / "data" / "closed_loop" / "aiconfigurator" / "minimax-m2.5"
TEP8 = Parallel(tp=8, ep=8)
# a decode step of 8 sequences (below vLLM's 32-token threshold) and an 8K prefill (above it)
SHAPES = (StepShape(decode_batch=8, decode_kv_len=1024), StepShape(prefill=((8192, 0),)))


def routers(model, shape):
    return [op for op in step_ops(model, TEP8, shape) if op.name == "router"]


def test_the_engines_rule_names_vllms_float32_gates():
    assert router_dtype(Engine.VLLM, "MiniMaxM2ForCausalLM") == Dtype.fp32
    assert router_dtype(Engine.VLLM, "Glm4MoeForCausalLM") == Dtype.fp32
    assert router_dtype(Engine.VLLM, "Qwen3MoeForCausalLM") == Dtype.bf16
    assert router_dtype(Engine.VLLM, "DeepseekV3ForCausalLM") == Dtype.bf16  # float32 output only
    # SGLang runs MiniMax-M2's float32 gate with TF32 on (tensor cores): not priced as float32 here
    assert router_dtype(Engine.SGLANG, "MiniMaxM2ForCausalLM") == Dtype.bf16
    assert router_dtype(Engine.TRTLLM, "MiniMaxM2ForCausalLM") == Dtype.bf16
    assert (Dtype.fp32.bytes, Dtype.fp32.compute) == (4.0, "fp32")


@pytest.mark.parametrize("shape", SHAPES)
def test_vllm_runs_minimax_m2s_router_in_float32_at_every_token_count(shape):
    minimax = load_model(str(MINIMAX))
    served = engine_profile("vllm").model_as_served(minimax)
    (router,) = routers(served, shape)
    tokens = shape.decode_batch or shape.prefill[0][0]
    assert router.key == Gemm(tokens, 256, 3072, "fp32") and router.count == 62
    # nothing but the router changes
    others = [op for op in step_ops(served, TEP8, shape) if op.name != "router"]
    assert others == [op for op in step_ops(minimax, TEP8, shape) if op.name != "router"]
    for engine in ("sglang", "trtllm", "torch"):
        (kept,) = routers(engine_profile(engine).model_as_served(minimax), shape)
        assert kept.key.dtype == "bf16"


def test_another_models_router_stays_bf16_on_vllm():
    qwen = load_model("qwen3-235b-a22b")
    served = engine_profile("vllm").model_as_served(qwen)
    assert served == qwen
    for shape in SHAPES:
        assert {op.key.dtype for op in routers(served, shape)} == {"bf16"}


@pytest.mark.parametrize("system", ["h100_sxm", "h200_sxm"])
def test_the_float32_router_is_priced_on_the_cuda_cores_roofline(system):
    """No table holds a float32 GEMM: the price is the roofline at the SMs' float32 rate (132 SMs x 128 lanes
    x 2 flops x 1.98 GHz = 67 TFLOPS, the H100 / H200 datasheets' figure), and the provenance says so."""
    spec = load_system(system)
    key = Gemm(8192, 256, 3072, "fp32")
    got = PerfDB(spec, backend="vllm").query(key)
    assert got.source == "roofline"
    assert "float32 on the CUDA cores at 67 TFLOPS (no tensor cores)" in got.note
    roof = Roofline(spec, backend="vllm")
    peak = spec.sm_count * FP32_LANES_PER_SM * 2 * SM_CLOCK_HZ
    compute_s = 2 * 8192 * 256 * 3072 / (peak * roof.eff.gemm_compute.get("fp32", 0.6))
    bytes_ = 4 * (256 * 3072 + 8192 * 3072 + 8192 * 256)  # float32 weights, input and logits
    assert compute_s > bytes_ / roof.bw  # compute-bound at 8K
    assert got.us == pytest.approx(compute_s * 1e6 + roof.kernel_us)
    # several times the bf16 tensor-core price of the same shape (9.4x on the H100's tables)
    assert got.us > 5 * PerfDB(spec, backend="vllm").query(key._replace(dtype="bf16")).us
