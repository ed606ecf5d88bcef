"""`servelab sweep --predict`: every job carries its benchmark's simulated twin, priced under the calibration
asked for; jobs that cannot be simulated say why."""

import json

import pytest
from clirun import servelab

from servelab.bench.spec import BenchSpec
from servelab.recipes.predict_jobs import bench_stream, predict_job
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import expand


def run(*args):
    return servelab(*args)


SWEEP = ("sweep", "llama70b-*", "--lowest-conc", "--seq-lens", "1k1k", "--predict")


def test_every_job_gets_its_twin():
    r = run(*SWEEP)
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    assert (answer["schema"], answer["schema_version"]) == ("servelab.jobs", 2)
    jobs = answer["jobs"]
    assert jobs
    for job in jobs:
        p = job["predicted"]
        assert p["source"] == "predicted" and "calibrated.json" in p["engine_profile"]
        stream = bench_stream(BenchSpec(**job["benches"][0]))
        assert p["completed"] == stream.num_prompts  # the twin replays every prompt of the job's client
        assert p["total_output_tokens"] > 0 and 0 < p["median_ttft_ms"] < p["p99_e2el_ms"]
        assert p["p50_tpot_ms"] == pytest.approx(p["median_tpot_ms"]) and p["p90_tpot_ms"] > 0
    # more GPUs for the same model and load: a faster decode step
    by_tp = {j["tp"]: j["predicted"]["median_tpot_ms"] for j in jobs}
    assert by_tp[8] < by_tp[2]
    # progress on stderr (a pipe here): the stage's first line, and the last with every job done
    said = r.stderr.splitlines()
    n = len(jobs)
    assert f"sweep --predict: jobs simulated: {n} to do" in said
    assert said[-1].startswith(f"sweep --predict: jobs simulated: {n}/{n} done, ")


def test_predictions_follow_the_calibration(tmp_path):
    slow = tmp_path / "slow.json"
    params = {"step_overhead_us": 20000.0, "per_seq_overhead_us": 1.0, "kernel_gap_us": 1.0}
    slow.write_text(json.dumps({"engines": {"vllm": {"params": params | {"eager_launch_us": 5.0}}}}))
    shipped = json.loads(run(*SWEEP).stdout)["jobs"]
    slowed = json.loads(run(*SWEEP, "--calibration", str(slow)).stdout)["jobs"]
    for a, b in zip(shipped, slowed, strict=True):
        assert b["predicted"]["median_tpot_ms"] > a["predicted"]["median_tpot_ms"] + 15.0
        assert "slow.json" in b["predicted"]["engine_profile"]


def test_predict_prints_json_only():
    r = run(*SWEEP, "--format", "github")
    assert r.returncode == 2 and "--predict" in r.stderr and r.stderr.count("\n") == 1


def test_jobs_that_cannot_be_simulated_say_why():
    store = open_store(None)
    job = expand(store, ["llama70b-*"])[0]
    disagg = job.model_copy(update={"row": {**job.row, "disagg": True}})
    assert predict_job(store, disagg) == {
        "source": "predicted",
        "error": "disaggregated jobs are not simulated",
    }
    mtp = job.model_copy(update={"row": {**job.row, "spec-decoding": "mtp"}})
    assert "speculative decoding mtp" in predict_job(store, mtp)["error"]
    bench = job.benches[0]
    sharegpt = bench.model_copy(update={"dataset_name": "sharegpt"})
    other = job.model_copy(update={"benches": [sharegpt]})
    assert "dataset sharegpt" in predict_job(store, other)["error"]
