"""`servelab report`: the page is built from result files, stored runs and predictions, one plot per view,
every figure with its sources, everything embedded escaped; bad files are one line and exit code 2."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from clirun import servelab as run_cli
from report_inputs import HOSTILE, estimate_json, plan_json, vllm_result

from servelab.errors import ServelabError
from servelab.results.importers import import_files
from servelab.results.report import (
    CDF_POINTS,
    cdf,
    figures,
    predicted_points,
    render_html,
    result_points,
    store_points,
    sweep_axis,
)
from servelab.results.store import Store


def servelab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_cli("report", *args, cwd=cwd)


def views(page: str) -> list[str]:
    return re.findall(r'<section class="view" id="view-(\w+)">', page)


def test_page_from_result_files_has_one_plot_per_view(sweep):
    points = [p for f in sweep for p in result_points(f)]
    page = render_html(points)
    assert views(page) == ["latency", "sweep", "pareto"]
    assert page.count('class="plotly-graph-div"') == 3
    assert "no predicted results given" in page
    # self-contained: plotly.js inlined once, nothing fetched
    assert page.count("plotly.js v") >= 1 and not re.search(r"<script[^>]+src=", page)
    # each figure says where its numbers came from
    assert "measured: conc1.json, conc4.json, conc8.json (per-request records: conc1.requests.jsonl)" in page


def test_latencies_from_records_else_percentiles(sweep):
    first, second, _ = (p for f in sweep for p in result_points(f))
    assert first.samples_from == "conc1.requests.jsonl"
    assert first.samples_ms["ttft"] == pytest.approx([50, 51, 52, 53])
    assert first.samples_ms["tpot"] == pytest.approx([10, 10, 10, 10])  # (70 - 50) ms / (3 - 1) tokens
    assert first.samples_ms["itl"] == pytest.approx([10] * 8)
    assert not second.samples_ms and second.latency_ms["ttft"] == {"mean": 54, "p50": 52, "p99": 94}
    fig = figures([first, second], "max_concurrency", per_gpu=False)[0][1]
    assert "percentiles" in fig["layout"]["title"]["text"]


def test_a_long_run_cdf_keeps_its_shape_in_few_points():
    xs, ys = cdf([float(v) for v in range(100_000, 0, -1)])
    assert len(xs) == CDF_POINTS and (xs[0], ys[0]) == (1.0, 1e-5) and (xs[-1], ys[-1]) == (100_000.0, 1.0)
    assert xs == sorted(xs) and all(abs(x / 100_000 - y) < 1e-4 for x, y in zip(xs, ys, strict=True))


def test_sweep_axis_is_what_differs(write_json):
    conc = [p for c in (1, 2) for p in result_points(write_json(f"c{c}.json", vllm_result(c)))]
    assert sweep_axis(conc) == "max_concurrency"
    rates = [
        p
        for r in (1.0, 2.0)
        for p in result_points(write_json(f"r{r}.json", vllm_result(None, request_rate=r)))
    ]
    assert sweep_axis(rates) == "request_rate"
    assert [p.request_rate for p in rates] == [1.0, 2.0]


def test_predicted_against_measured(sweep, write_json):
    plan = write_json("plan.json", plan_json())
    estimates = [write_json(f"est{b}.json", estimate_json(b)) for b in (1, 8)]
    measured = [p for f in sweep for p in result_points(f)]
    predicted = predicted_points(plan) + [p for f in estimates for p in predicted_points(f)]
    assert [p.source for p in predicted] == ["predicted"] * 4
    assert [p.max_concurrency for p in predicted] == [4, 1, 1, 8]
    page = render_html(measured + predicted)
    assert views(page) == ["latency", "sweep", "pareto", "predicted"]
    assert page.count('class="plotly-graph-div"') == 4
    fig = figures(measured + predicted, "max_concurrency", per_gpu=False)[-1][1]
    names = {t["name"] for t in fig["data"]}
    assert {
        "measured: Qwen/Qwen3-0.6B",
        "predicted: Qwen/Qwen3-0.6B agg tp1",
        "predicted: qwen3-0.6b agg tp1",
    } <= names
    assert "predicted: plan.json #1 agg tp1, plan.json #2 agg tp1, est1.json, est8.json" in page
    # a simulated result file in the vLLM shape is a prediction too
    assert predicted_points(sweep[1])[0].source == "predicted"


def test_pareto_front_marks_the_frontier(write_json):
    # concurrency 8 has the most throughput, concurrency 1 the most tokens/s per user; 4 lies between them
    points = [p for c in (1, 4, 8) for p in result_points(write_json(f"c{c}.json", vllm_result(c)))]
    points += result_points(write_json("bad.json", vllm_result(8, mean_tpot_ms=40.0, output_throughput=10.0)))
    pareto = figures(points, "max_concurrency", per_gpu=False)[2][1]
    front = next(t for t in pareto["data"] if t["name"] == "measured Pareto front")
    assert list(front["y"]) == [800.0, 400.0, 100.0]


def test_gpus_give_throughput_per_gpu(write_json):
    point = result_points(write_json("r.json", vllm_result(4, num_gpus=2)))[0]
    assert point.output_tok_s_per_gpu == 200.0
    assert result_points(write_json("s.json", vllm_result(4)), gpus=4)[0].output_tok_s_per_gpu == 100.0


def test_hostile_names_are_escaped(tmp_path, write_json):
    path = write_json("a<b>.json", vllm_result(4, model_id=HOSTILE, label=HOSTILE))
    page = render_html(result_points(path), title=HOSTILE)
    assert "<script>document" not in page and "<img" not in page and "</script><script>" not in page
    assert "&lt;script&gt;" in page and "a&lt;b&gt;.json" in page
    # inside a figure too: plotly reads some tags in its text (<a href>, <b>), so names are escaped for it
    sweep = figures(result_points(path), "max_concurrency", per_gpu=False)[1][1]
    assert sweep["data"][0]["name"].startswith("measured: &lt;/script&gt;&lt;script&gt;")


def test_runs_from_the_store(tmp_path, write_json):
    files = [write_json(f"c{c}.json", vllm_result(c)) for c in (1, 4)]
    with Store.open(tmp_path / "r.db") as store:
        imported = import_files(store, files, name="qwen-sweep")
        points = store_points(store, "qwen-sweep")
        assert sorted(p.max_concurrency for p in points) == [1, 4]
        assert {p.origin.split()[1] for p in points} == {i.run_id for i in imported}
        assert points[0].latency_ms["ttft"]["p50"] in (49.0, 52.0)
        with pytest.raises(ServelabError, match="no run 'nope'"):
            store_points(store, "nope")


def test_cli_writes_the_page(sweep, write_json, tmp_path):
    plan = write_json("plan.json", plan_json())
    r = servelab(*map(str, sweep), "--predicted", str(plan), "-o", "out.html", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "report: out.html (5 points)" in r.stdout
    assert views((tmp_path / "out.html").read_text()) == ["latency", "sweep", "pareto", "predicted"]
    r = servelab(str(sweep[0]), "-o", "one.html", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["report"] == "one.html" and data["points"][0]["samples_from"] == "conc1.requests.jsonl"
    assert data["points"][0]["latency_ms"]["ttft"]["mean"] == 51.0 and "samples_ms" not in data["points"][0]


def test_cli_stored_run(tmp_path, write_json):
    files = [write_json(f"c{c}.json", vllm_result(c)) for c in (1, 4)]
    with Store.open(tmp_path / "r.db") as store:
        import_files(store, files, name="qwen-sweep")
    r = servelab("--store", "r.db", "--run", "qwen-sweep", "-o", "out.html", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "run " in (tmp_path / "out.html").read_text()


@pytest.mark.parametrize(
    ("content", "predicted", "message"),
    [
        ("{not json", False, "bad.json: not JSON"),
        ('{"hello": 1}', False, "bad.json: not a known result file"),
        ("[]", False, "bad.json: an empty list"),
        ("{not json", True, "bad.json: not JSON"),
        ('{"candidates": [{"rank": 1}], "request": {}}', True, "bad.json: malformed prediction"),
        ('{"mode": "agg", "batch": 1}', True, "bad.json: malformed prediction"),
    ],
)
def test_bad_files_are_one_line_exit_2(tmp_path, content, predicted, message):
    (tmp_path / "bad.json").write_text(content)
    args = ["--predicted", "bad.json"] if predicted else ["bad.json"]
    r = servelab(*args, "-o", "out.html", cwd=tmp_path)
    assert r.returncode == 2 and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "out.html").exists()


def test_cli_other_bad_input(tmp_path, write_json):
    r = servelab("missing.json", "-o", "out.html", cwd=tmp_path)
    assert r.returncode == 2 and "missing.json: cannot read" in r.stderr
    r = servelab("-o", "out.html", cwd=tmp_path)
    assert r.returncode == 2 and "nothing to report" in r.stderr
    good = write_json("g.json", vllm_result(1))
    r = servelab(str(good), "-o", str(tmp_path / "no" / "such" / "out.html"), cwd=tmp_path)
    assert r.returncode == 2 and "--output" in r.stderr and "cannot write" in r.stderr
    (tmp_path / "g.requests.jsonl").write_text(json.dumps({"ok": True, "sent": 0, "chunks": "x"}) + "\n")
    r = servelab(str(good), "-o", "out.html", cwd=tmp_path)
    assert r.returncode == 2 and "g.requests.jsonl: not servelab per-request records" in r.stderr
