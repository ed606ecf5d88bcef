"""`servelab results compare`, predicted against measured: a stored predicted run (--predicted RUN), or the
twin of a measured run found in the store or simulated from its recorded deployment (--twin)."""

import json
import shutil
from pathlib import Path

import pytest
from clirun import servelab

from servelab.results.importers import import_files, record_bench
from servelab.results.provenance import Provenance
from servelab.results.store import Store

ARGV = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "1"]


def run(*args):
    return servelab(*args)


@pytest.fixture(scope="module")
def twin_file(tmp_path_factory):
    """A `servelab bench --simulate` result of Llama-3.1-8B on one H200 under vLLM."""
    out = tmp_path_factory.mktemp("twin")
    r = run(
        "bench", "--simulate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--system", "h200_sxm",
        "--dataset-name", "random", "--random-input-len", "512", "--random-output-len", "64",
        "--random-range-ratio", "0.5", "--num-prompts", "24", "--max-concurrency", "8", "--seed", "3",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-result", "--result-dir", str(out), "--result-filename", "twin.json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return out / "twin.json"


def measured_run(store: Store, result_file, argv=ARGV) -> str:
    """A run as a measured one is stored: provenance with the server command and GPU, the bench stage with the
    result file as its artifact."""
    run_id = store.start_run(
        "meta-llama/Llama-3.1-8B-Instruct", Provenance(server_argv=argv, gpu="1x NVIDIA H200")
    )
    artifact = store.run_dir(run_id) / "bench.json"
    shutil.copy(result_file, artifact)
    data = json.loads(artifact.read_text())
    record_bench(store, run_id, data, artifact=str(artifact.relative_to(store.path.parent)))
    store.finish_run(run_id, "pass")
    return run_id


def rows_of(result) -> dict:
    assert result.returncode == 0, result.stderr
    return {r["metric"]: r for r in json.loads(result.stdout)["rows"]}


def test_twin_simulated_from_the_recorded_deployment(tmp_path, twin_file):
    """'Measured' numbers that are themselves this deployment's twin: the twin rebuilt from the run's server
    command, GPU and bench flags must reproduce them exactly; a change of any (lengths, range ratio, seed,
    concurrency, parallel split) would show as an error."""
    db = tmp_path / "results.db"
    with Store.open(db) as store:
        run_id = measured_run(store, twin_file)
    rows = rows_of(run("results", "compare", run_id, "--twin", "--store", str(db), "--json"))
    for metric in ("median_ttft_ms", "p90_ttft_ms", "median_tpot_ms", "p99_e2el_ms", "duration"):
        assert rows[metric]["error_pct"] == pytest.approx(0.0, abs=1e-6), metric
    # the same run on TP2 is another deployment: its twin differs
    with Store.open(db) as store:
        tp2 = measured_run(store, twin_file, argv=[*ARGV[:3], "--tensor-parallel-size", "2"])
    rows = rows_of(run("results", "compare", tp2, "--twin", "--store", str(db), "--json"))
    assert rows["median_tpot_ms"]["error_pct"] < -1.0  # two GPUs decode faster


def test_twin_replays_the_client_workers_the_run_started(tmp_path):
    """A measured run's flags say --num-workers 0 (one per core); its client section says how many worker
    processes it started, each sending its own round robin share: the twin replays those."""
    out = tmp_path / "twin"
    r = run(
        "bench", "--simulate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--system", "h200_sxm",
        "--dataset-name", "random", "--random-input-len", "2048", "--random-output-len", "64",
        "--random-range-ratio", "0.2", "--num-prompts", "24", "--max-concurrency", "6", "--seed", "5",
        "--num-workers", "3", "--percentile-metrics", "ttft,tpot", "--metric-percentiles", "50,90",
        "--save-result", "--result-dir", str(out), "--result-filename", "w3.json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    measured = json.loads((out / "w3.json").read_text())
    measured["config"]["num_workers"] = 0
    errors = {}
    for started in (3, 0):
        measured["client"]["num_workers"] = started
        path = tmp_path / f"measured{started}.json"
        path.write_text(json.dumps(measured))
        db = tmp_path / f"results{started}.db"
        with Store.open(db) as store:
            run_id = measured_run(store, path)
        rows = rows_of(run("results", "compare", run_id, "--twin", "--store", str(db), "--json"))
        errors[started] = max(
            abs(rows[m]["error_pct"]) for m in ("median_ttft_ms", "p90_ttft_ms", "duration")
        )
    assert errors[3] == pytest.approx(0.0, abs=1e-6)
    assert errors[0] > 0.1  # one client queue is another stream: the workers matter here


def test_twin_under_a_calibration(tmp_path, twin_file):
    slow = tmp_path / "slow.json"
    params = {"step_overhead_us": 20000.0, "per_seq_overhead_us": 1.0, "kernel_gap_us": 1.0}
    slow.write_text(json.dumps({"engines": {"vllm": {"params": params | {"eager_launch_us": 5.0}}}}))
    db = tmp_path / "results.db"
    with Store.open(db) as store:
        run_id = measured_run(store, twin_file)
    r = run("results", "compare", run_id, "--twin", "--calibration", str(slow), "--store", str(db), "--json")
    assert rows_of(r)["median_tpot_ms"]["error_pct"] > 50.0
    assert "slow.json" in json.loads(r.stdout)["predicted_by"]


def test_predicted_run_from_the_store(tmp_path, twin_file, vllm_result, write_json):
    """--predicted RUN: the twin's result imported (stored as predicted) against a measured import; --twin
    finds that predicted run by name."""
    db = tmp_path / "results.db"
    measured = dict(
        vllm_result(max_concurrency=8, median_ttft_ms=100.0), model_id="meta-llama/Llama-3.1-8B-Instruct"
    )
    with Store.open(db) as store:
        (m,) = import_files(store, [Path(write_json("measured.json", measured))])
        (p,) = import_files(store, [twin_file])
    predicted = json.loads(twin_file.read_text())
    rows = rows_of(run("results", "compare", m.run_id, "--predicted", p.run_id, "--store", str(db), "--json"))
    ttft = rows["median_ttft_ms"]
    assert ttft["measured"] == 100.0 and ttft["predicted"] == pytest.approx(predicted["median_ttft_ms"])
    assert ttft["error_pct"] == pytest.approx(predicted["median_ttft_ms"] - 100.0)  # % of 100 ms
    assert "completed" not in rows and "num_prompts" not in rows  # counts and settings are not judged
    found = json.loads(run("results", "compare", m.run_id, "--twin", "--store", str(db), "--json").stdout)
    assert found["predicted_by"] == p.run_id


@pytest.mark.parametrize(
    "args, message",
    [
        (("--twin",), "recorded no server command"),
        (("B", "--twin"), "give B, or --predicted RUN, or --twin"),
        (("--calibration", "x.json", "--predicted", "y"), "use it with --twin"),
    ],
)
def test_refusals_are_one_line(tmp_path, vllm_result, write_json, args, message):
    db = tmp_path / "results.db"
    with Store.open(db) as store:
        (m,) = import_files(store, [Path(write_json("measured.json", vllm_result()))])
    r = run("results", "compare", m.run_id, *args, "--store", str(db))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr
