"""`servelab plan`: the search, its ranking and Pareto flags, bad input, the explanation and the HTML
report."""

import json

import plotly.graph_objects as go
import pytest
from typer.testing import CliRunner

from servelab.cli.main import app
from servelab.errors import ServelabError
from servelab.predict.plan import PlanRequest, explain, make_plan
from servelab.predict.plan.report import pareto_chart, render_html, safe_json

DSV3 = {"model": "deepseek-ai/DeepSeek-V3", "system": "h200_sxm", "gpus": 8, "isl": 4000, "osl": 1000}


@pytest.fixture(scope="module")
def dsv3_plan():
    return make_plan(PlanRequest(**DSV3, ttft_ms=2000, tpot_ms=30))


@pytest.mark.slow  # 1.0 s of CPU a case: a whole plan search
def test_candidates_meet_the_sla_and_are_ranked(dsv3_plan):
    cands = dsv3_plan.candidates
    assert cands and cands[0].rank == 1
    assert all(c.meets_sla and c.ttft_ms <= 2000 and c.tpot_ms <= 30 for c in cands)
    ranked = sorted(cands, key=lambda c: c.rank)
    assert [c.tok_s_per_gpu for c in ranked] == sorted((c.tok_s_per_gpu for c in ranked), reverse=True)
    for c in cands:
        assert c.gpus == 8 and c.mode == "agg"
        assert c.tok_s_per_gpu_low <= c.tok_s_per_gpu <= c.tok_s_per_gpu_high
        assert c.ttft_ms_low <= c.ttft_ms <= c.ttft_ms_high
        assert c.tok_s_per_user == pytest.approx(1000 / c.tpot_ms)
        assert c.limits  # every candidate names what bounds it


def test_pareto_flags_mark_exactly_the_undominated(dsv3_plan):
    cands = dsv3_plan.candidates
    front = [c for c in cands if c.pareto]
    assert front
    for c in front:  # nothing in the plan beats a front point on both axes
        assert not any(
            o.tok_s_per_gpu > c.tok_s_per_gpu and o.tok_s_per_user > c.tok_s_per_user for o in cands
        )
    assert cands[0].pareto  # the highest throughput per GPU is always on the front


@pytest.mark.slow  # 1.0 s of CPU a case: a whole plan search
def test_search_is_fast_and_reports_its_work(dsv3_plan):
    k = dsv3_plan.considered
    assert k.configs >= 10 and k.simulations >= k.configs
    assert dsv3_plan.wall_ms > 0  # reported; how long it takes is benchmarks/speed.py's to measure
    assert any("disagg" in n for n in dsv3_plan.notes)  # one DeepSeek-V3 replica needs all 8 GPUs


def test_aggregated_points_take_their_rates_by_littles_law(dsv3_plan):
    """Every aggregated point's output rate is its request rate x OSL and holds its concurrency in flight for
    the mean E2EL (Little's law), as a decode worker's does: not the short measuring window's rates, which
    counted more requests than their tokens (predict.serving.aggregated.steady_rates)."""
    cands = dsv3_plan.candidates
    assert cands and all(c.mode == "agg" for c in cands)
    for c in cands:
        assert c.tok_s_per_gpu * c.gpus == pytest.approx(c.request_rate * DSV3["osl"], rel=1e-9)
        in_flight = c.request_rate * c.percentiles["e2el_ms"]["mean"] / 1000.0
        assert in_flight == pytest.approx(c.concurrency, rel=1e-9)


def test_tighter_tpot_means_lower_concurrency(dsv3_plan):
    tight = make_plan(PlanRequest(**DSV3, ttft_ms=2000, tpot_ms=15))
    assert tight.candidates[0].tpot_ms <= 15
    assert tight.candidates[0].tok_s_per_gpu < dsv3_plan.candidates[0].tok_s_per_gpu


def test_impossible_sla_names_the_closest_and_the_binding_limit():
    with pytest.raises(ServelabError) as e:
        make_plan(PlanRequest(**DSV3, ttft_ms=2000, tpot_ms=1))
    msg = str(e.value)
    assert "no configuration meets" in msg and "closest" in msg and "TPOT binds" in msg
    with pytest.raises(ServelabError, match="TTFT binds"):
        make_plan(PlanRequest(**DSV3, ttft_ms=5, tpot_ms=100))


def test_too_few_gpus_says_what_would_fit():
    with pytest.raises(ServelabError, match="fits no configuration on 2x h200_sxm.*gpus 8"):
        make_plan(PlanRequest(**{**DSV3, "gpus": 2}))


def test_explain_names_time_and_limits(dsv3_plan):
    ex = explain(dsv3_plan, 1)
    assert ex["rank"] == 1 and ex["limits"]
    decode = ex["time"]["decode_step_us"]
    assert {"moe", "attention", "engine overhead"} <= set(decode)
    assert ex["versus"]
    with pytest.raises(ServelabError, match="no candidate of rank 999"):
        explain(dsv3_plan, 999)


def test_html_report_escapes_everything(dsv3_plan):
    page = render_html(dsv3_plan)
    assert page.startswith("<!doctype html>") and "Pareto front" in page
    data = json.loads(page.split('id="plan-data">')[1].split("</script>")[0])
    assert data["candidates"][0]["rank"] == 1
    nasty = {"x": "</script><script>alert(1)</script>&"}
    assert "</script>" not in safe_json(nasty) and json.loads(safe_json(nasty)) == nasty


def test_html_reports_chart_is_what_plotly_builds_from_it(dsv3_plan):
    # built as plain JSON (servelab.plotjson): plotly's validators accept it and change nothing in it
    chart = pareto_chart(dsv3_plan.model_dump(mode="json"))
    assert go.Figure(chart).to_plotly_json() == chart
    assert [t["name"] for t in chart["data"]][-1] == "Pareto front" and len(chart["data"][0]["x"]) > 1


def test_cli_json_and_bad_input(tmp_path):
    runner = CliRunner()
    out = runner.invoke(
        app,
        [
            "plan",
            "qwen3-32b",
            "--gpus",
            "4",
            "--isl",
            "2000",
            "--osl",
            "200",
            "--tpot-ms",
            "40",
            "--mode",
            "agg",
            "--json",
            "--top",
            "3",
            "--report",
            str(tmp_path / "p.html"),
        ],
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert isinstance(data["candidates"], list) and data["candidates"][0]["rank"] == 1
    first = data["candidates"][0]
    for key in (
        "mode",
        "parallel",
        "replicas",
        "concurrency",
        "ttft_ms",
        "ttft_ms_low",
        "ttft_ms_high",
        "tpot_ms",
        "tpot_ms_low",
        "tpot_ms_high",
        "tok_s_per_gpu",
        "tok_s_per_user",
        "memory_headroom_gib",
        "pareto",
        "meets_sla",
        "limits",
    ):
        assert key in first
    assert "label" in first["parallel"] and "tp" in first["parallel"]
    assert (tmp_path / "p.html").stat().st_size > 1000
    bad = runner.invoke(app, ["plan", "qwen3-32b", "--mode", "sideways"])
    assert isinstance(bad.exception, ServelabError) and "--mode" in str(bad.exception)
    bad = runner.invoke(app, ["plan", "qwen3-32b", "--gpus", "0"])
    assert isinstance(bad.exception, ServelabError) and "--gpus" in str(bad.exception)
    # the library names request fields; the CLI names them as its flags
    bad = runner.invoke(app, ["plan", "deepseek-ai/DeepSeek-V3", "--gpus", "2"])
    assert isinstance(bad.exception, ServelabError) and "use --gpus 8 or more" in str(bad.exception)


def test_estimate_agg_cli():
    out = CliRunner().invoke(
        app,
        [
            "estimate",
            "qwen3-32b",
            "--tp",
            "2",
            "--batch",
            "8",
            "--isl",
            "1000",
            "--osl",
            "100",
            "--mode",
            "agg",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["mode"] == "agg" and set(data["percentiles"]) == {"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"}


QWEN = ["plan", "qwen3-32b", "--gpus", "4", "--isl", "2000", "--osl", "200", "--mode", "agg", "--top", "3"]


@pytest.mark.slow  # 1.0 s of CPU a case: a whole plan search
def test_default_sla_is_interactive_and_stated():
    assert PlanRequest().default_sla and (PlanRequest().ttft_ms, PlanRequest().tpot_ms) == (2000, 50)
    assert not PlanRequest(tpot_ms=30).default_sla
    runner = CliRunner()
    text = runner.invoke(app, QWEN)
    assert text.exit_code == 0, text.output
    assert "SLA (default, interactive): TTFT <= 2000 ms and TPOT <= 50 ms at the mean" in text.stdout
    data = json.loads(runner.invoke(app, [*QWEN, "--json"]).stdout)
    assert (data["request"]["ttft_ms"], data["request"]["tpot_ms"]) == (2000, 50)
    assert all(c["tpot_ms"] <= 50 and c["ttft_ms"] <= 2000 for c in data["candidates"])
    assert any("interactive default" in n for n in data["notes"])


@pytest.mark.slow  # 1.9 s of CPU a case: a whole plan search
def test_no_sla_ranks_by_throughput_alone():
    runner = CliRunner()
    data = json.loads(runner.invoke(app, [*QWEN, "--no-sla", "--json"]).stdout)
    assert data["request"]["ttft_ms"] is None and data["request"]["tpot_ms"] is None
    assert data["candidates"][0]["tpot_ms"] > 50  # the saturated deployment the default SLA rules out
    text = runner.invoke(app, [*QWEN, "--no-sla"]).stdout
    assert "SLA: none (--no-sla)" in text
    partial = runner.invoke(app, [*QWEN, "--tpot-ms", "30"]).stdout
    assert "SLA: TTFT <= 2000 ms (default) and TPOT <= 30 ms at the mean" in partial
    bad = runner.invoke(app, [*QWEN, "--no-sla", "--tpot-ms", "30"])
    assert isinstance(bad.exception, ServelabError) and "--no-sla" in str(bad.exception)


QWEN_REQ = {"model": "qwen3-32b", "gpus": 4, "isl": 2000, "osl": 200, "mode": "agg"}


def test_e2e_limit_holds_for_every_candidate_and_names_itself_when_it_binds():
    plan = make_plan(PlanRequest(**QWEN_REQ, e2e_ms=4000))
    assert all(c.ttft_ms + 199 * c.tpot_ms <= 4000 for c in plan.candidates)
    loose = make_plan(PlanRequest(**QWEN_REQ))
    assert plan.candidates[0].tok_s_per_gpu < loose.candidates[0].tok_s_per_gpu
    with pytest.raises(ServelabError, match=r"E2E <= 100 ms.*E2E binds"):
        make_plan(PlanRequest(**QWEN_REQ, e2e_ms=100))


@pytest.mark.slow  # 0.9 s of CPU a case: a whole plan search
def test_request_rate_is_a_floor_on_the_served_rate():
    plan = make_plan(PlanRequest(**QWEN_REQ, request_rate=10))
    assert plan.candidates and all(c.request_rate >= 10 for c in plan.candidates)
    loose = make_plan(PlanRequest(**QWEN_REQ))
    assert min(c.request_rate for c in loose.candidates) < 10  # the floor removed some
    bad = CliRunner().invoke(
        app,
        [
            "plan",
            "qwen3-32b",
            "--gpus",
            "4",
            "--isl",
            "2000",
            "--osl",
            "200",
            "--mode",
            "agg",
            "--request-rate",
            "1000",
        ],
    )
    assert isinstance(bad.exception, ServelabError)
    assert "no configuration serves --request-rate 1000 requests/s" in str(bad.exception)
    assert "the most is" in str(bad.exception)


def test_context_longer_than_the_model_takes_is_one_line_naming_both_numbers():
    with pytest.raises(
        ServelabError,
        match="isl 40000 \\+ osl 2000 = 42000 tokens exceeds qwen3-32b's maximum context of 40960 tokens",
    ):
        make_plan(PlanRequest(model="qwen3-32b", isl=40000, osl=2000))
    bad = CliRunner().invoke(app, ["plan", "qwen3-32b", "--isl", "40000", "--osl", "2000"])
    assert isinstance(bad.exception, ServelabError) and str(bad.exception).startswith(
        "--isl 40000 + --osl 2000"
    )


@pytest.mark.slow  # 6.1 s of CPU a case: a whole plan search
def test_vllm_and_sglang_plans_offer_only_expert_parallel_splits_they_launch():
    moe = {"model": "qwen3-30b-a3b", "gpus": 4, "isl": 2000, "osl": 200, "mode": "agg", "top": 50}
    for backend in ("vllm", "sglang"):
        plan = make_plan(PlanRequest(**moe, backend=backend))
        assert all(c.parallel["ep"] in (1, c.parallel["tp"]) for c in plan.candidates)
        assert any("expert parallel over all 4 GPUs" in d for d in plan.dropped)
    trt = make_plan(PlanRequest(**moe, backend="trtllm"))
    assert not any("expert parallel over all" in d for d in trt.dropped)
