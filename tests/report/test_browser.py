"""The page as a browser shows it: headless Chromium (Debian's `chromium` package) loads the report offline
and every view's plot draws (plotly adds `class="main-svg"` SVG elements when it draws); hostile names in a
result file run no script. Also a report of real `servelab bench` runs against the mock server."""

from __future__ import annotations

import html
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from report_inputs import HOSTILE, estimate_json, plan_json, vllm_result

from servelab.results.report import latency_figure, predicted_points, render_html, result_points, store_points
from servelab.results.store import Store

CHROMIUM = Path("/usr/bin/chromium")
SRC = str(Path(__file__).resolve().parents[2] / "src")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (Debian: apt-get install chromium)"
)


def rendered_dom(page: Path) -> str:
    """The DOM after the page's scripts ran (5 s of virtual time: plotly draws on load)."""
    r = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,  # a hang guard only
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def drawn_views(dom: str) -> dict[str, int]:
    """Each view's section -> how many plotly SVG layers it holds."""
    sections = re.findall(r'<section class="view" id="view-(\w+)">(.*?)</section>', dom, re.S)
    return {view: body.count('class="main-svg"') for view, body in sections}


@pytest.mark.slow  # 2.6 s of CPU a case: a real browser
@needs_chromium
def test_every_view_draws_and_hostile_names_run_nothing(tmp_path, write_json, sweep):
    hostile = write_json("h<img src=x>.json", vllm_result(2, model_id=HOSTILE, label=HOSTILE))
    points = [p for f in [*sweep, hostile] for p in result_points(f)]
    points += predicted_points(write_json("plan.json", plan_json(HOSTILE)))
    points += predicted_points(write_json("est.json", estimate_json(8)))
    page = tmp_path / "report.html"
    page.write_text(render_html(points, title=HOSTILE), encoding="utf-8")
    dom = rendered_dom(page)
    drawn = drawn_views(dom)
    assert list(drawn) == ["latency", "sweep", "pareto", "predicted"]
    assert all(n >= 1 for n in drawn.values()), drawn
    # no injected script set the title: it is still the hostile text, shown as written
    assert html.unescape(re.search(r"<title>(.*?)</title>", dom, re.S)[1]) == HOSTILE
    assert "<img src=" not in dom  # the hostile tag is text, not an element


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mock_server():
    """The mock streaming server (servelab.bench.mock_server) in its own process: 20 ms to the first token,
    then 5 ms a token."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "servelab.bench.mock_server", "--port", str(port), "--token-delay-ms", "5",
         "--first-token-delay-ms", "20"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": SRC},
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "mock server did not start"
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


def servelab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "servelab.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard only
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": SRC},
    )


@pytest.mark.slow
def test_report_of_real_bench_runs(tmp_path, mock_server):
    for conc in (1, 4):
        load = ["--random-input-len", "16", "--random-output-len", "8", "--num-prompts", "8"]
        r = servelab("bench", "--base-url", mock_server, "--model", "mock", *load, "--max-concurrency",
                     str(conc), "--num-workers", "1", "--save-result", "--result-filename", f"c{conc}.json",
                     cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stderr
    r = servelab("report", "c1.json", "c4.json", "-o", "report.html", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    points = [p for f in ("c1.json", "c4.json") for p in result_points(tmp_path / f)]
    assert [p.samples_from for p in points] == ["c1.requests.jsonl", "c4.requests.jsonl"]
    assert all(len(p.samples_ms["ttft"]) == 8 and len(p.samples_ms["itl"]) == 8 * 7 for p in points)
    # the mock sends no first token before 20 ms (a lower bound only: a loaded machine delays, never hastens)
    assert all(len(p.samples_ms["tpot"]) == 8 and min(p.samples_ms["ttft"]) >= 19 for p in points)
    page = (tmp_path / "report.html").read_text()
    assert "per-request records: c1.requests.jsonl, c4.requests.jsonl" in page
    if CHROMIUM.exists():
        drawn = drawn_views(rendered_dom(tmp_path / "report.html"))
        assert list(drawn) == ["latency", "sweep", "pareto"] and all(drawn.values()), drawn


WORKLOAD = """name: tiny
gpu: H200
vllm: {model: mock}
vllm_bench:
  configs:
    - {name: s, input_len: 16, output_len: 4, num_prompts: [8, 8], max_concurrency: [1, 4]}
"""


@pytest.mark.slow
def test_report_of_a_stored_run_draws_its_records_and_aggregates_repetitions(tmp_path, mock_server):
    (tmp_path / "wl.yaml").write_text(WORKLOAD)
    r = servelab("run", "wl.yaml", "--base-url", mock_server, "--repetitions", "3", "--store", "r.db",
                 cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    r = servelab("report", "--store", "r.db", "--run", "tiny", "-o", "report.html", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)["points"]
    # one point per config, not per repetition: the median of three runs with the interval of that median
    assert [(p["max_concurrency"], p["repetitions"]) for p in shown] == [(1.0, 3), (4.0, 3)]
    for p in shown:
        ttft = p["intervals"]["ttft"]
        assert ttft["kind"] == "CI 75.0%" and ttft["low"] <= p["latency_ms"]["ttft"]["mean"] <= ttft["high"]
    with Store.open(tmp_path / "r.db") as store:
        points = store_points(store, "tiny")
    # every panel from the records of the three repetitions pooled (E2EL too, which the run stored no
    # percentile of), so each CDF has a step per request, not a line through two percentiles
    for p in points:
        assert {m: len(p.samples_ms[m]) for m in ("ttft", "tpot", "e2el")} == {
            "ttft": 24,
            "tpot": 24,
            "e2el": 24,
        }
        assert len(p.samples_ms["itl"]) == 24 * 3 and "e2el" not in p.latency_ms
    cdfs = latency_figure(points)
    assert all(len(trace["x"]) == 24 for trace in cdfs["data"] if trace["xaxis"] in ("x", "x2", "x4"))
    # series named by config and concurrency; the run id only in where the numbers came from
    assert [trace["name"] for trace in cdfs["data"] if trace["showlegend"]] == [
        "measured: tiny s conc 1 (median of 3)",
        "measured: tiny s conc 4 (median of 3)",
    ]
    page = (tmp_path / "report.html").read_text()
    if not CHROMIUM.exists():
        pytest.skip(f"page checked in Python only: {CHROMIUM} is absent (Debian: apt-get install chromium)")
    dom = rendered_dom(tmp_path / "report.html")
    drawn = drawn_views(dom)
    assert list(drawn) == ["latency", "sweep", "pareto"] and all(drawn.values()), drawn
    assert "error bars: the interval of that median" in page
    sweep = re.search(r'<section class="view" id="view-sweep">(.*?)</section>', dom, re.S)[1]
    assert sweep.count('class="yerror"') == 3 * 2  # TTFT, TPOT and throughput at both concurrencies
