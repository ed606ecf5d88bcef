"""`--explain` on the command line: `servelab estimate --mode agg` prints the split and puts it in --json
under "explain"; static and disaggregated mode, and `servelab bench` without --simulate, refuse it in one
line (exit 2); `servelab bench --simulate --explain` writes it into the result file."""

import json

import pytest
from clirun import servelab

AGG = ("estimate", "llama-3.1-8b", "--mode", "agg", "--batch", "8", "--isl", "2048", "--osl", "64")


def test_estimate_json_carries_the_split_and_the_table_prints_it():
    r = servelab(*AGG, "--explain", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    ex = data["explain"]
    assert sum(row["mean_ms"] for row in ex["rows"]) == pytest.approx(data["ttft_ms"], rel=1e-9)
    assert sum(row["median_ms"] for row in ex["rows"]) == pytest.approx(
        data["percentiles"]["ttft_ms"]["p50"], rel=1e-9
    )
    table = servelab(*AGG, "--explain")
    assert table.returncode == 0, table.stderr
    for label in ("Where the predicted TTFT goes", "kernel: gemm", "step_overhead_us", "documented default"):
        assert label in table.stdout


def test_without_explain_the_answer_has_no_split():
    r = servelab(*AGG, "--json")
    assert r.returncode == 0, r.stderr
    assert "explain" not in json.loads(r.stdout)


@pytest.mark.parametrize(
    "args",
    [
        ("estimate", "llama-3.1-8b", "--batch", "8"),  # static mode
        ("estimate", "llama-3.1-8b", "--mode", "disagg", "--prefill-tp", "1", "--decode-tp", "1"),
    ],
)
def test_static_and_disagg_say_in_one_line_that_it_explains_the_twin_only(args):
    r = servelab(*args, "--explain")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--explain" in lines[0] and "twin" in lines[0], r.stderr


def test_bench_explain_needs_simulate():
    r = servelab("bench", "--model", "llama-3.1-8b", "--explain")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--explain" in r.stderr and "--simulate" in r.stderr


def test_bench_simulate_explain_writes_the_split_into_the_result(tmp_path):
    r = servelab(
        "bench", "--simulate", "--model", "llama-3.1-8b", "--system", "h200_sxm", "--dataset-name", "random",
        "--random-input-len", "1024", "--random-output-len", "32", "--num-prompts", "32",
        "--max-concurrency", "8", "--explain", "--save-result", "--result-dir", tmp_path,
        "--result-filename", "twin.json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "Where the predicted TTFT goes" in r.stdout
    result = json.loads((tmp_path / "twin.json").read_text())
    rows = result["explain"]["rows"]
    assert sum(row["mean_ms"] for row in rows) == pytest.approx(result["mean_ttft_ms"], rel=1e-9)
    assert sum(row["median_ms"] for row in rows) == pytest.approx(result["median_ttft_ms"], rel=1e-9)
