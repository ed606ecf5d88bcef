"""TensorRT-LLM's fitted MoE terms (per prompt token and per routed expert) were fitted on H200 rows whose
experts ran TRITON (gpt-oss) or CUTLASS (DeepSeek); a run whose experts TensorRT-LLM puts on another backend
(TRTLLMGenFusedMoE: MXFP4 experts on Blackwell) does not pay them, every other run does."""

import pytest

from servelab.engines.trtllm.moe import CUTLASS, TRITON, TRTLLM, moe_backend, unfitted_backend
from servelab.perfdb.db import perfdb_for
from servelab.predict.engines import MOE_TERMS, engine_profile
from servelab.predict.graph import StepShape
from servelab.predict.serving.pricing import StepPricer
from servelab.predict.serving.ttft_explain import TermPricer
from servelab.predict.step import priced_step
from servelab.specs import Dtype, Parallel, load_model, load_system

GPT_OSS, LLAMA = load_model("gpt-oss-120b"), load_model("llama-3.1-8b")
H200, B200 = load_system("h200_sxm"), load_system("b200_sxm")
TP2 = Parallel(tp=2)
TERMS = {"moe_prompt_token_us": 0.3, "eager_moe_route_us": 250.0, "moe_route_us": 12.0}
FITTED = engine_profile("trtllm").model_copy(update=TERMS)
NONE = engine_profile("trtllm").model_copy(update=dict.fromkeys(MOE_TERMS, 0.0))
PREFILL, DECODE = StepShape(prefill=((1024, 0),)), StepShape(decode_batch=8, decode_kv_len=2048)


@pytest.mark.parametrize(
    ("experts", "cc", "backend"),
    [
        (Dtype.mxfp4, 90, TRITON),
        (Dtype.mxfp4, 100, TRTLLM),
        (Dtype.mxfp4, 103, TRTLLM),
        (Dtype.mxfp4, 120, CUTLASS),
        (Dtype.fp8_block, 90, CUTLASS),
        (Dtype.fp8_block, 100, TRTLLM),
        (Dtype.fp8_block, 120, CUTLASS),
        (Dtype.nvfp4, 100, None),
    ],
)
def test_the_backend_follows_the_expert_format_and_the_gpu(experts, cc, backend):
    assert moe_backend(experts, cc) == backend


def test_only_mxfp4_experts_on_another_backend_leave_the_fit():
    assert unfitted_backend(Dtype.mxfp4, 100) == TRTLLM
    assert unfitted_backend(Dtype.mxfp4, 90) is None  # TRITON, as fitted
    assert unfitted_backend(Dtype.fp8_block, 100) is None  # kept: see the docstring
    assert unfitted_backend(Dtype.nvfp4, 100) is None


def test_gpt_oss_on_blackwell_is_priced_without_the_fitted_moe_terms():
    assert GPT_OSS.precision.experts == Dtype.mxfp4
    db = perfdb_for(B200, "trtllm")
    for shape in (PREFILL, DECODE):
        assert priced_step(GPT_OSS, TP2, shape, FITTED, db) == priced_step(GPT_OSS, TP2, shape, NONE, db)
    running = FITTED.running(GPT_OSS, B200)
    assert [getattr(running, t) for t in MOE_TERMS] == [0.0, 0.0, 0.0]
    assert "this runs TRTLLM" in running.source


def test_gpt_oss_on_hopper_pays_them():
    db = perfdb_for(H200, "trtllm")
    for shape in (PREFILL, DECODE):
        assert priced_step(GPT_OSS, TP2, shape, FITTED, db).us > priced_step(GPT_OSS, TP2, shape, NONE, db).us
    assert FITTED.running(GPT_OSS, H200) is FITTED


def test_other_engines_dense_models_and_deepseek_are_left_alone():
    vllm = engine_profile("vllm").model_copy(update=TERMS)
    assert vllm.running(GPT_OSS, B200) is vllm
    assert FITTED.running(LLAMA, B200) is FITTED
    # DeepSeek's experts run the fitted backend on B200 too: its family keeps the fit's CPU term there (the
    # terms of GPU time stay on the fit's H200: servelab.predict.fit_reach)
    deepseek = FITTED.running(load_model("deepseek-r1"), B200)
    assert deepseek.eager_moe_route_us == FITTED.eager_moe_route_us > 0
    assert "TRTLLMGen" not in deepseek.source and "GPU time fitted on h200_sxm" in deepseek.source


def test_explain_splits_the_step_as_it_is_priced():
    db = perfdb_for(B200, "trtllm")
    terms = TermPricer(StepPricer(GPT_OSS, TP2, FITTED, db))._priced(PREFILL)[0]
    assert terms["engine", "moe_route_us"] == 0.0
    assert sum(terms.values()) == pytest.approx(priced_step(GPT_OSS, TP2, PREFILL, FITTED, db).us)
