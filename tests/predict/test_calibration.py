"""The engine-calibration fitting code (servelab.calibrate) on synthetic rows: row mapping, the minimiser,
and that a fit recovers parameters that generated the 'measurements'."""

import math

import numpy as np
import pytest

from servelab.calibrate.crossval import leave_one_family_out
from servelab.calibrate.fit import Linearized, errors_of, fit, fit_engine, loss, nelder_mead, soft_l1
from servelab.calibrate.price import Pricer, defaults, fit_start
from servelab.calibrate.rows import build_cases, concurrency_of, parallel_of, to_case
from servelab.specs import load_system


def row(**kw):
    base = {
        "id": "r1",
        "silicon_data_source": "x; silicon_concurrency=16",
        "backend": "vllm",
        "backend_version": "0.12.0",
        "model_path": "meta-llama/Llama-3.1-70B",
        "system": "h200_sxm",
        "mode": "agg",
        "isl": "1024",
        "osl": "1024",
        "gemm_quant_mode": "fp8",
        "moe_quant_mode": "fp8",
        "batch_size": "16",
        "tp_size": "4",
        "pp_size": "1",
        "attention_dp_size": "1",
        "moe_tp_size": "4",
        "moe_ep_size": "1",
        "silicon_ttft_ms": "100",
        "silicon_tpot_ms": "10",
    }
    base.update(kw)
    return base


def test_row_mapping():
    case = to_case(row())
    assert case.family == "llama" and case.model_name == "llama-3.1-70b"
    assert case.model.precision.weights.value == "fp8"  # measured with FP8 quantization of a BF16 checkpoint
    assert case.parallel.tp == 4 and case.concurrency == 16 and (case.isl, case.osl) == (1024, 1024)


def test_concurrency_falls_back_to_batch_size():
    assert concurrency_of(row(silicon_data_source="db-dump", batch_size="8.0")) == 8


def test_parallel_reading():
    moe = {"model_path": "deepseek-ai/DeepSeek-R1", "backend": "trtllm"}
    # tp_size written as tp x ep (64 GPUs on an 8-GPU node): read as tp 8 x ep 8
    p, note = parallel_of(row(**moe, tp_size="64", moe_tp_size="8", moe_ep_size="8"))
    assert (p.tp, p.ep, p.dp_attn) == (8, 8, False) and "read as" in note
    p, _ = parallel_of(row(**moe, tp_size="1", attention_dp_size="8", moe_tp_size="1", moe_ep_size="8"))
    assert (p.tp, p.ep, p.dp_attn) == (8, 8, True)
    with pytest.raises(ValueError, match="attention on 1 GPUs but MoE on 2"):
        parallel_of(row(tp_size="1", attention_dp_size="", moe_tp_size="2", moe_ep_size="1"))
    # InferenceX's single-node vLLM runs of {tp: T, ep: T}, written tp T, attention_dp T, moe_ep T x T by the
    # later exports (16 GPUs for tp4_ep4 on an 8-GPU node), ran on T GPUs: tp T x ep T
    vllm = {"model_path": "MiniMaxAI/MiniMax-M2.5", "backend": "vllm"}
    for t in (2, 4):
        p, note = parallel_of(
            row(**vllm, tp_size=str(t), attention_dp_size=str(t), moe_tp_size="1", moe_ep_size=str(t * t))
        )
        assert (p.tp, p.ep, p.dp_attn, p.gpus) == (t, t, False, t) and "read as" in note
    # the earlier export's form of the same runs reads the same
    p, _ = parallel_of(row(**vllm, tp_size="4", attention_dp_size="1", moe_tp_size="1", moe_ep_size="4"))
    assert (p.tp, p.ep, p.dp_attn) == (4, 4, False)
    # a dense model ignores the MoE fields
    p, _ = parallel_of(row(tp_size="2", moe_tp_size="1"), is_moe=False)
    assert p.tp == 2


def test_rows_left_out_are_counted():
    rows = [row(), row(mode="disagg"), row(model_path="org/not-a-model"), row(system="b200_sxm")]
    cases, skipped = build_cases(rows, "h200_sxm")
    assert len(cases) == 1
    assert skipped == {
        "mode disagg (only aggregated rows are fitted)": 1,
        "model org/not-a-model is not embedded": 1,
    }


def test_nelder_mead_finds_a_minimum():
    target = np.array([1.0, -2.0, 0.5])
    x, fx = nelder_mead(lambda x: float(np.sum((x - target) ** 2)), np.zeros(3), iters=400, tol=1e-12)
    assert np.allclose(x, target, atol=1e-3) and fx < 1e-6


def test_soft_l1_is_quadratic_then_linear():
    small, large = soft_l1(np.array([0.01])), soft_l1(np.array([1.0, 2.0]))
    assert small[0] == pytest.approx(0.01**2, rel=0.01)
    assert large[1] - large[0] == pytest.approx(0.2, rel=0.05)  # slope = scale far out


def synthetic_cases(truth, families=("qwen3-32b", "llama-3.1-8b")):
    """Cases whose 'measurements' are servelab's own static predictions with known engine parameters."""
    system = load_system("h200_sxm")
    price = Pricer(system, "static")
    cases = []
    checkpoints = {
        "qwen3-32b": "Qwen/Qwen3-32B",
        "llama-3.1-70b": "meta-llama/Llama-3.1-70B",
        "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
        "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    }
    for fam in families:
        for c in (1, 4, 16, 64):
            for isl, osl in ((1024, 1024), (8192, 1024)):
                case = to_case(
                    row(
                        model_path=checkpoints[fam],
                        batch_size=str(c),
                        isl=str(isl),
                        osl=str(osl),
                        silicon_data_source=f"silicon_concurrency={c}",
                        tp_size="4",
                        moe_tp_size="4",
                    )
                )
                case.ttft_ms, case.tpot_ms = price(case, truth)
                cases.append(case)
    return cases, price


def test_fit_recovers_the_generating_parameters():
    truth = {
        "step_overhead_us": 2500.0,
        "per_seq_overhead_us": 30.0,
        "kernel_gap_us": 1.0,
        "eager_launch_us": 6.0,
    }
    cases, price = synthetic_cases(truth)
    start = fit_start()["vllm"]
    before = loss(cases, start, price)
    fitted = fit(cases, start, price, iters=150)
    assert loss(cases, fitted, price) < before / 100
    ttft, tpot = errors_of(cases, fitted, price)
    assert np.median(tpot) < 0.01 and np.median(ttft) < 0.01
    # the per-step overhead is what TPOT at small batch sees: it must come back close to the truth
    assert math.isclose(fitted["step_overhead_us"], truth["step_overhead_us"], rel_tol=0.1)


def test_leave_one_family_out_predicts_each_family_unseen():
    truth = {
        "step_overhead_us": 2000.0,
        "per_seq_overhead_us": 10.0,
        "kernel_gap_us": 1.0,
        "eager_launch_us": 6.0,
    }
    cases, price = synthetic_cases(truth)
    cv = leave_one_family_out(cases, fit_start(), price, iters=60)
    assert set(cv["by_family"]) == {"vllm/qwen", "vllm/llama"}
    assert len(cv["ttft"]) == len(cases)
    # both families share the generating engine, so a fit on one transfers to the other
    assert np.median(cv["tpot"]) < 0.05


def test_linearized_predictor_matches_the_real_one():
    """The fit runs on a finite-difference linearization; near its point it must agree with the predictor, and
    the TTFT terms the step model lacks enter TTFT alone, exactly."""
    truth = {
        "step_overhead_us": 900.0,
        "per_seq_overhead_us": 6.0,
        "kernel_gap_us": 1.0,
        "eager_launch_us": 6.0,
        "ttft_overhead_ms": 20.0,
        "ttft_per_request_ms": 0.5,
    }
    cases, price = synthetic_cases(truth, families=("llama-3.1-8b",))
    lin = Linearized(cases, truth, price)
    moved = dict(truth, step_overhead_us=1100.0, ttft_overhead_ms=25.0, ttft_per_request_ms=0.6)
    exact = np.array([price(c, moved) for c in cases])
    approx = lin.predict(moved)
    assert np.allclose(approx, exact, rtol=0.02)
    only_ttft = lin.predict(dict(truth, ttft_overhead_ms=25.0)) - lin.base
    assert np.allclose(only_ttft[:, 0], 5.0) and np.allclose(only_ttft[:, 1], 0.0)


def test_moe_prompt_cost_is_an_engine_parameter_priced_by_the_simulator():
    """moe_prompt_token_us reaches the step model through the engine profile: a dense row is unchanged; a MoE
    row's TTFT grows by at least its prompt's tokens x MoE layers x the cost, and the fit's linearization sees
    it. The documented default is 0; the fit starts off 0, where the log-space search can move."""
    price = Pricer(load_system("h200_sxm"), "aggregated", prompts_per_concurrency=2)
    dense = to_case(row(batch_size="2", **{"silicon_data_source": "x; silicon_concurrency=2"}))
    moe = to_case(
        row(
            model_path="Qwen/Qwen3-235B-A22B-FP8",
            tp_size="2",
            moe_tp_size="2",
            isl="2000",
            batch_size="2",
            **{"silicon_data_source": "x; silicon_concurrency=2"},
        )
    )
    cost = {"moe_prompt_token_us": 0.5}
    assert defaults()["vllm"]["moe_prompt_token_us"] == 0.0 < fit_start()["vllm"]["moe_prompt_token_us"]
    assert price(dense, cost) == price(dense, {})
    (ttft, _), (ttft0, _) = price(moe, cost), price(moe, {})
    assert moe.model.num_moe_layers > 0
    assert ttft - ttft0 >= 0.5 * 2000 * moe.model.num_moe_layers / 1000.0
    lin = Linearized([dense, moe], dict(defaults()["vllm"], **cost), price)
    k = lin.names.index("moe_prompt_token_us")
    assert lin.jac[0, 0, k] == 0.0 and lin.jac[1, 0, k] > 0


def test_the_moe_prompt_cost_is_fitted_from_moe_rows_only():
    """Fitted where MoE rows price it (it comes back close to the cost that generated them); left at its
    documented 0 by a fit, or a cross-validation fold, that sees dense rows only."""
    truth = {
        "step_overhead_us": 2000.0,
        "per_seq_overhead_us": 10.0,
        "kernel_gap_us": 1.0,
        "eager_launch_us": 6.0,
        "moe_prompt_token_us": 0.6,
    }
    cases, price = synthetic_cases(truth, families=("llama-3.1-8b", "qwen3-30b-a3b"))
    fitted, _ = fit_engine(cases, fit_start()["vllm"], price, iters=150)
    assert math.isclose(fitted["moe_prompt_token_us"], 0.6, rel_tol=0.1)
    dense = [c for c in cases if not c.model.is_moe]
    assert "moe_prompt_token_us" not in fit_engine(dense, fit_start()["vllm"], price, iters=30)[0]
    cv = leave_one_family_out(cases, fit_start(), price, iters=60)
    assert "moe_prompt_token_us" not in cv["params"]["vllm/qwen"]  # trained on Llama alone
    assert "moe_prompt_token_us" in cv["params"]["vllm/llama"]
