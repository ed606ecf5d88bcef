"""A calibration's fitted MoE terms apply where the evidence of its rows reaches (servelab.predict.fit_reach):
the MoE families it was fitted on, on any system (on another GPU than the fit's, only the term of CPU time),
and any family on the system its rows ran on (its leave-one-family-out cross-validation carries them there);
another family on another system is priced without them, and the profile says why, as does `--explain` where
they apply."""

import json

import pytest

from servelab.engines import moe_code_family
from servelab.perfdb.db import perfdb_for
from servelab.predict.engines import (
    GPU_MOE_TERMS,
    MOE_TERMS,
    engine_profile,
    fitted_params,
    shipped_calibration,
)
from servelab.predict.fit_reach import FitReach
from servelab.predict.graph import StepShape
from servelab.predict.serving import estimate_aggregated
from servelab.predict.step import priced_step
from servelab.specs import Parallel, load_model, load_system

H100, H200, B200 = load_system("h100_sxm"), load_system("h200_sxm"), load_system("b200_sxm")
QWEN_MOE, DEEPSEEK, GPT_OSS = (
    load_model("qwen3-235b-a22b"),
    load_model("deepseek-r1"),
    load_model("gpt-oss-120b"),
)
TP8 = Parallel(tp=8, ep=8)
PREFILL, DECODE = StepShape(prefill=((1024, 0),)), StepShape(decode_batch=8, decode_kv_len=2048)
TRTLLM = engine_profile("trtllm")


def terms(profile):
    return [getattr(profile, t) for t in MOE_TERMS]


def test_the_record_keeps_the_fits_moe_models_and_its_system():
    reach = FitReach.of(["deepseek-r1", "gpt-oss-120b", "llama-3.1-70b", "not-embedded-x"], ["h200_sxm"])
    assert reach.moe_models == ("deepseek-r1", "gpt-oss-120b")  # Llama is dense; an unknown name says nothing
    assert reach.families == ("deepseek", "gpt-oss")
    shipped = json.loads(shipped_calibration().read_text())
    assert TRTLLM.moe_fit == FitReach.of(shipped["engines"]["trtllm"]["models"], ["h200_sxm"])


@pytest.mark.parametrize(
    ("model", "system", "applied", "why"),
    [
        ("deepseek-r1", "h200_sxm", True, "fitted on this family's rows (deepseek-r1) on h200_sxm"),
        ("deepseek-v4-pro", "b200_sxm", True, "fitted on this family's rows (deepseek-r1) on h200_sxm"),
        ("qwen3-235b-a22b", "h200_sxm", True, "which carry to a family left out there"),
        ("qwen3-235b-a22b", "h100_sxm", False, "qwen3-235b-a22b (family qwen) on h100_sxm is neither"),
    ],
)
def test_the_verdict_follows_the_family_and_the_system(model, system, applied, why):
    reach = FitReach.of(["deepseek-r1", "gpt-oss-120b"], ["h200_sxm"])
    got, said = reach.verdict(model, system)
    assert got is applied and why in said


def test_qwen3_235b_on_h100_is_priced_without_the_shipped_moe_terms():
    assert all(terms(TRTLLM))  # the shipped fit has all three
    running = TRTLLM.running(QWEN_MOE, H100)
    assert terms(running) == [0.0, 0.0, 0.0]
    assert "not applied: fitted on deepseek, gpt-oss rows on h200_sxm; qwen3-235b-a22b" in running.source
    none = TRTLLM.model_copy(update=dict.fromkeys(MOE_TERMS, 0.0))
    db = perfdb_for(H100, "trtllm")
    for shape in (PREFILL, DECODE):
        assert priced_step(QWEN_MOE, TP8, shape, TRTLLM, db) == priced_step(QWEN_MOE, TP8, shape, none, db)


def test_where_the_evidence_reaches_the_terms_are_paid():
    assert TRTLLM.running(QWEN_MOE, H200) is TRTLLM
    # the fit's families on another GPU keep the term of CPU time, not those of the fit GPU's time
    for model, system in ((DEEPSEEK, B200), (GPT_OSS, H100)):  # gpt-oss: TRITON on Hopper, as fitted
        running = TRTLLM.running(model, system)
        running_terms = dict(zip(MOE_TERMS, terms(running), strict=True))
        assert running_terms == {
            **dict.fromkeys(GPU_MOE_TERMS, 0.0),
            "eager_moe_route_us": TRTLLM.eager_moe_route_us,
        }
        why = f"GPU time fitted on h200_sxm, this is {system.name}"
        assert f"moe_prompt_token_us, moe_route_us not applied: {why}" in running.source
    none = TRTLLM.model_copy(update=dict.fromkeys(MOE_TERMS, 0.0))
    db = perfdb_for(H200, "trtllm")
    assert priced_step(QWEN_MOE, TP8, DECODE, TRTLLM, db).us > priced_step(QWEN_MOE, TP8, DECODE, none, db).us


def test_every_engines_fit_is_bounded_the_same_way():
    sglang = engine_profile("sglang")  # fitted on DeepSeek-V3 and Qwen3-235B on H200
    assert sglang.running(QWEN_MOE, H200) is sglang
    assert terms(sglang.running(QWEN_MOE, H100)) == [0.0, sglang.eager_moe_route_us, 0.0]
    assert terms(sglang.running(GPT_OSS, B200)) == [0.0, 0.0, 0.0]


def test_terms_set_by_hand_or_a_file_without_the_record_apply_as_given(tmp_path):
    by_hand = engine_profile("trtllm", moe_route_us=5.0)
    assert by_hand.moe_fit is None and by_hand.running(QWEN_MOE, H100) is by_hand
    path = tmp_path / "calibrated.json"
    path.write_text(json.dumps({"engines": {"trtllm": {"params": fitted_params("trtllm")}}}))
    older = engine_profile("trtllm", calibration=path)
    assert older.moe_fit is None and older.running(QWEN_MOE, H100) is older


def test_explain_says_why_the_terms_apply_and_the_profile_why_not():
    def explain(system):
        engine = engine_profile("trtllm", system.hbm_gib, gpu_name=system.gpu_name)
        got = estimate_aggregated(QWEN_MOE, system, TP8, engine, 8, 1024, 64, explain=fitted_params("trtllm"))
        return got.explain

    applied = explain(H200)
    route = next(r for r in applied["rows"] if "(moe_route_us)" in r["term"])
    assert route["source"] == (
        "calibrated: fitted on deepseek, gpt-oss rows on h200_sxm, which carry to a family left out there "
        "(leave-one-family-out)"
    )
    dropped = explain(H100)
    assert not any(t in r["term"] for r in dropped["rows"] for t in MOE_TERMS)
    assert "moe_route_us not applied" in dropped["engine_profile"]


def test_a_record_without_the_system_leaves_the_terms_unbounded(tmp_path):
    fit = {"params": fitted_params("trtllm"), "models": ["deepseek-r1"]}
    without, with_system = tmp_path / "without.json", tmp_path / "with.json"  # a file is read once by path
    without.write_text(json.dumps({"provenance": {"command": "by hand"}, "engines": {"trtllm": fit}}))
    assert engine_profile("trtllm", calibration=without).moe_fit is None
    record = {"provenance": {"settings": {"system": "h200_sxm"}}, "engines": {"trtllm": fit}}
    with_system.write_text(json.dumps(record))
    bounded = engine_profile("trtllm", calibration=with_system)
    assert bounded.moe_fit == FitReach(systems=("h200_sxm",), moe_models=("deepseek-r1",))
    assert terms(bounded.running(QWEN_MOE, H100)) == [0.0, 0.0, 0.0]


def test_glm5_runs_deepseeks_moe_code_in_sglang_so_the_cpu_term_reaches_it_there():
    """SGLang serves GLM-5 with a subclass of DeepSeek's model class (engines/sglang/model_classes.py), so
    the CPU term fitted on DeepSeek-V3's rows carries to it on B200, as to DeepSeek itself; TensorRT-LLM
    (no such record) leaves GLM-5 on B200 without the terms."""
    glm5 = load_model("glm-5")
    assert moe_code_family("sglang", glm5.architecture) == "deepseek"
    assert moe_code_family("trtllm", glm5.architecture) is None
    assert moe_code_family("torch", glm5.architecture) is None  # not an engine
    sglang = engine_profile("sglang")
    running = sglang.running(glm5, B200)
    assert terms(running) == [0.0, sglang.eager_moe_route_us, 0.0] and sglang.eager_moe_route_us > 0
    applied, why = sglang.moe_terms_reach(glm5, B200)
    assert applied and "whose MoE code the engine runs glm-5 with" in why
    assert terms(TRTLLM.running(glm5, B200)) == [0.0, 0.0, 0.0]
