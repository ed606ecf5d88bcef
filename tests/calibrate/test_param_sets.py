"""Each engine's fit chooses which parameters transfer: every nested parameter set
(calibrate.params.PARAM_SETS) is fitted and cross-validated leaving one model family out, the best
cross-validated set is kept when it beats the defaults, the parameters outside it keep their documented
defaults, and the calibration file records the choice and every set's score."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from servelab.calibrate.calibration_file import FORMAT, engine_entries, verdicts
from servelab.calibrate.crossval import fit_param_sets
from servelab.calibrate.fit import errors_of
from servelab.calibrate.params import FIT_START, PARAM_SETS
from servelab.calibrate.price import base_profiles
from servelab.predict.engines import engine_profile, read_calibration

# a toy engine whose TTFT and TPOT are affine in its parameters; `moe`: the MoE routes of a row (0: dense)
DEFAULTS = {
    "step_overhead_us": 1000.0,
    "per_seq_overhead_us": 10.0,
    "kernel_gap_us": 1.0,
    "eager_launch_us": 5.0,
    "moe_prompt_token_us": 0.0,
    "eager_moe_route_us": 0.0,
    "moe_route_us": 0.0,
}
TRUTH = {"step_overhead_us": 2000.0, "per_seq_overhead_us": 20.0}
START = {"trtllm": {**DEFAULTS, **FIT_START}}


def toy_price(case, params: dict[str, float]) -> tuple[float, float]:
    p = {**DEFAULTS, **params}
    per_seq = p["per_seq_overhead_us"] * case.concurrency
    moe = case.moe * p["moe_route_us"]
    ttft = p["step_overhead_us"] / 100 + per_seq / 10 + moe / 10
    return ttft, p["step_overhead_us"] / 1000 + per_seq / 100


def rows() -> list:
    """Three families measured at step 2000 us, per sequence 20 us: a dense one, and two MoE families of
    which only one pays a MoE route cost (4 routes at 125 us): fitted on one MoE family, that term is wrong
    on the other."""
    out = []
    for family, moe, moe_cost in (("llama", 0, 0.0), ("gpt-oss", 4, 0.0), ("deepseek", 4, 125.0)):
        for conc in (1, 4, 16, 64):
            case = SimpleNamespace(row_id=f"{family}-{conc}", engine="trtllm", family=family, moe=moe)
            case.model_name, case.concurrency, case.isl = family, conc, 1024
            case.ttft_ms, case.tpot_ms = toy_price(case, {**TRUTH, "moe_route_us": moe_cost})
            out.append(case)
    return out


@pytest.fixture(scope="module")
def chosen():
    cases = rows()
    by_set = fit_param_sets(cases, START, toy_price, iters=200)
    before = errors_of(cases, {}, lambda c, p: toy_price(c, DEFAULTS))
    return cases, by_set, verdicts(["trtllm"], cases, before, {n: s["cv"]["rows"] for n, s in by_set.items()})


def test_a_term_that_does_not_transfer_is_left_at_its_default(chosen):
    cases, by_set, got = chosen
    v = got["trtllm"]
    assert set(v.set_scores) == set(PARAM_SETS)
    # every term: the MoE layer cost fitted on DeepSeek sends gpt-oss left out far off
    assert v.set_scores["all"] > 2 * min(v.set_scores.values())
    assert by_set["all"]["cv"]["by_family"]["trtllm/gpt-oss"]["ttft"]["median"] > 1.0
    # a smaller set transfers: it is chosen and kept, and its fit carries no MoE layer cost
    assert v.param_set != "all" and v.kept
    assert v.cv_score == min(v.set_scores.values()) < v.defaults_score
    fitted = by_set[v.param_set]["fitted"]["trtllm"]
    assert "moe_route_us" not in fitted
    # the set's parameters that the rows price (the toy has no MoE prompt or eager CPU term, and a term no
    # row prices keeps its documented 0)
    assert set(fitted) == set(PARAM_SETS[v.param_set]) - {"moe_prompt_token_us", "eager_moe_route_us"}
    assert fitted["step_overhead_us"] == pytest.approx(2000.0, rel=0.05)
    assert by_set[v.param_set]["cv"]["by_family"]["trtllm/gpt-oss"]["ttft"]["median"] < 0.05


def test_a_term_that_transfers_keeps_the_full_set():
    """Every MoE family pays the same MoE layer cost: the full set predicts each one left out best."""
    cases = [c for c in rows() if c.family != "gpt-oss"]
    for c in cases:  # a second MoE family paying the same 4 x 125 us
        if c.family == "llama":
            c.family, c.moe = "qwen", 4
            c.ttft_ms, c.tpot_ms = toy_price(c, {**TRUTH, "moe_route_us": 125.0})
    by_set = fit_param_sets(cases, START, toy_price, iters=200)
    before = errors_of(cases, {}, lambda c, p: toy_price(c, DEFAULTS))
    v = verdicts(["trtllm"], cases, before, {n: s["cv"]["rows"] for n, s in by_set.items()})["trtllm"]
    assert v.param_set == "all" and v.kept
    assert v.set_scores["all"] < v.set_scores["no_moe_layer_gpu"]


def test_a_tie_goes_to_the_smaller_set():
    cases = [SimpleNamespace(row_id="r0", engine="vllm")]
    before = (np.array([0.5]), np.array([0.5]))
    same = {"r0": (0.1, 0.1)}
    v = verdicts(["vllm"], cases, before, {"all": same, "no_moe_layer_gpu": same})["vllm"]
    assert v.param_set == "no_moe_layer_gpu"


def test_the_file_records_the_chosen_set_and_reads_back(chosen, tmp_path):
    cases, by_set, got = chosen
    name = got["trtllm"].param_set
    fitted = {"trtllm": by_set[name]["fitted"]["trtllm"]}
    doc = {
        "calibration_format": FORMAT,
        "_provenance": "test",
        "engines": {e: fit.model_dump() for e, fit in engine_entries(fitted, cases, False, got).items()},
        "verdicts": {e: v.model_dump() for e, v in got.items()},
    }
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(doc))
    again = json.loads(path.read_text())["engines"]["trtllm"]
    assert again["param_set"] == name and again["set_scores"] == got["trtllm"].set_scores
    assert "proposed_terms" not in again  # a fit without terms EngineProfile lacks writes none
    assert set(read_calibration(path).engines["trtllm"].params) == set(fitted["trtllm"])
    profile = engine_profile("trtllm", calibration=path)
    assert profile.step_overhead_us == pytest.approx(fitted["trtllm"]["step_overhead_us"], abs=1e-3)
    # outside the chosen set: the documented default, not a fitted value
    assert profile.moe_route_us == base_profiles()["trtllm"].moe_route_us
