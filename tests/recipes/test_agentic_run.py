"""Single-node agentic-coding jobs run: their benchmark point is InferenceX's trace replay (the row's
concurrency for its duration, on the chat API), the trace a file the user names in SERVELAB_AGENTIC_TRACE.
The job's script checks it before anything starts (under bash, with a stub servelab), and `servelab run`
replays it against servelab's mock server, keeping the per-turn results."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import servelab
from pinned import pinned_jobs

from servelab.recipes.job import AGENTIC_TRACE_ENV
from servelab.recipes.pipelines import JOB_FILE, run_argv, script
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import expand
from servelab.results.store import Store

ROOT = Path(__file__).resolve().parents[2]
IX = ROOT / "tests" / "data" / "inferencex"
TRACE = IX / "agentic" / "traces.jsonl"  # made by InferenceX's converter (scripts/agentic_sample.py)
KEY = "minimaxm3-fp8-h100-vllm-agentic-mtp"  # vLLM, launched equal to upstream's script
SRC = str(ROOT / "src")

pytestmark = [
    pytest.mark.skipif(shutil.which("bash") is None, reason="job scripts run under bash"),
    pytest.mark.timeout(300),  # hang guard only
]

# Stands in for servelab: records its argv, the trace variable it was given and the job file.
STUB = """#!/usr/bin/env bash
printf '%s\\0' "$@" > "$STUB_LOG/argv"
printf '%s' "${SERVELAB_AGENTIC_TRACE-unset}" > "$STUB_LOG/trace"
cp servelab-job.json "$STUB_LOG/job.json"
"""


@pytest.fixture(scope="module")
def job():
    jobs = [j for j in expand(open_store(IX / "configs"), [KEY]) if j.launch is not None]
    assert jobs and all(j.scenario == "agentic-coding" for j in jobs)
    return next(j for j in jobs if j.point.conc > 1)


def test_every_launched_single_node_agentic_job_replays_a_trace():
    jobs = pinned_jobs()  # the pinned store's whole sweep, expanded once a test process
    agentic = [j for j in jobs if j.scenario == "agentic-coding" and j.launch is not None]
    assert len(agentic) == 467
    for j in agentic:
        assert j.unrunnable is None
        [bench] = j.benches
        row = j.point
        assert (bench.dataset_name, bench.max_concurrency, bench.max_seconds) == ("trace", row.conc, 3600)
        assert (bench.endpoint, bench.num_prompts) == ("/v1/chat/completions", None)
        assert bench.config(dataset_path=str(TRACE)).trace_max_gap_s == 300  # InferenceX's idle-gap cap


def _stub(tmp_path: Path) -> tuple[dict, Path]:
    bindir, log = tmp_path / "bin", tmp_path / "log"
    bindir.mkdir()
    log.mkdir()
    (bindir / "servelab").write_text(STUB)
    (bindir / "servelab").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != AGENTIC_TRACE_ENV}
    return {**env, "PATH": f"{bindir}:{env['PATH']}", "STUB_LOG": str(log)}, log


def _bash(text: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    cwd.mkdir()
    return subprocess.run(["bash", "-c", text], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.slow  # 1.3 s of CPU a case: the job script under bash with a trace replay
def test_the_script_runs_the_trace_replay(job, tmp_path):
    env, log = _stub(tmp_path)
    r = _bash(script(job), tmp_path / "w", {**env, AGENTIC_TRACE_ENV: str(TRACE)})
    assert r.returncode == 0, r.stderr
    assert ["servelab", *(log / "argv").read_bytes().decode().split("\0")[:-1]] == run_argv(job)
    assert (log / "trace").read_text() == str(TRACE)  # servelab run reads it there
    [bench] = json.loads((log / "job.json").read_text())["benches"]
    assert bench["dataset_name"] == "trace" and "dataset_path" not in bench
    assert (bench["max_concurrency"], bench["max_seconds"]) == (job.point.conc, job.point.duration)


@pytest.mark.parametrize("trace", [None, "", "missing.jsonl"])
def test_the_script_stops_in_one_line_without_the_trace(job, tmp_path, trace):
    env, log = _stub(tmp_path)
    r = _bash(script(job), tmp_path / "w", env if trace is None else {**env, AGENTIC_TRACE_ENV: trace})
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"{AGENTIC_TRACE_ENV}: set it to the trace file")
    assert not list(log.iterdir()) and not (tmp_path / "w" / JOB_FILE).exists()  # nothing started


def _servelab(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "servelab.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": SRC, **env},
    )


# a whole servelab run replaying the trace against the mock (5-15 s): quick, the job's trace bench above and
# tests/bench/test_agentic_replay.py's replays against the mock server
@pytest.mark.slow
def test_servelab_run_replays_the_trace_and_keeps_per_turn_results(job, tmp_path, mock_url):
    data = job.to_json()
    data["benches"][0]["max_seconds"] = 2  # the row's hour, shortened
    (tmp_path / JOB_FILE).write_text(json.dumps(data))
    args = ("run", "--job", JOB_FILE, "--base-url", mock_url, "--store", "r.db")
    r = _servelab(*args, cwd=tmp_path, env={AGENTIC_TRACE_ENV: str(TRACE)})
    assert r.returncode == 0, r.stdout + r.stderr
    with Store.open(str(tmp_path / "r.db")) as store:
        [run] = store.list_runs()
        assert (run.name, run.outcome) == (KEY, "pass")
        [stage] = [s for s in store.stages(run.id) if s.stage == "bench"]
        completed = [m.value for m in store.metrics(run.id) if m.name == "completed"]
        assert completed and completed[0] > 0
        result = json.loads(store.artifact_path(run.id, stage.artifact).read_text())
    agentic = result["agentic"]
    assert agentic["trace"]["path"] == str(TRACE)
    assert agentic["replay"]["until_max_seconds"] and agentic["replay"]["max_concurrency"] == job.point.conc
    turns = agentic["per_turn"]
    assert turns and turns[0]["turn"] == 0 and sum(t["completed"] for t in turns) > 0
    # a session cut short by the duration is how a timed replay ends, not a failure
    assert result["failed"] == 0


def test_servelab_run_without_the_trace_says_so_in_one_line(job, tmp_path):
    (tmp_path / JOB_FILE).write_text(json.dumps(job.to_json()))
    env = {k: v for k, v in os.environ.items() if k != AGENTIC_TRACE_ENV}
    for given in ({}, {AGENTIC_TRACE_ENV: str(tmp_path / "nope.jsonl")}):
        r = servelab("run", "--job", JOB_FILE, "--dry-run", cwd=tmp_path, env={**env, **given})
        assert r.returncode == 2
        [line] = [x for x in r.stderr.splitlines() if x.startswith("error:")]
        assert AGENTIC_TRACE_ENV in line and "Traceback" not in r.stderr


def test_every_deployed_multinode_agentic_job_replays_a_trace_at_each_concurrency():
    """Upstream's multinode agentic client (amd_utils/trace_replay.sh, agentic_srt.sh) replays the trace at
    each concurrency of the row in turn against the one deployment, saving `<result name>_conc<N>.json`."""
    jobs = pinned_jobs()
    multinode = [j for j in jobs if j.scenario == "agentic-coding" and j.deployment is not None]
    assert len(multinode) >= 190
    for j in multinode:
        assert j.unrunnable is None
        row = j.point
        assert [b.max_concurrency for b in j.benches] == row.concs
        for bench, conc in zip(j.benches, row.concs, strict=True):
            assert (bench.dataset_name, bench.max_seconds, bench.endpoint) == (
                "trace",
                row.duration,
                "/v1/chat/completions",
            )
            assert bench.result_filename.startswith(f"{j.key}_{row.exp_name}_")
            assert bench.result_filename.endswith(f"_conc{conc}.json")


# a whole servelab run, two replays against the mock (5-19 s): quick, each concurrency's bench in
# test_every_deployed_multinode_agentic_job_replays_a_trace_at_each_concurrency and
# tests/bench/test_agentic_replay.py::test_concurrency_counts_sessions
@pytest.mark.slow
def test_servelab_run_replays_each_concurrency_of_a_multinode_agentic_job(tmp_path, mock_url):
    jobs = expand(open_store(IX / "configs"), ["dsv4-fp8-h200-dynamo-sglang-agentic*"])
    job = next(j for j in jobs if j.deployment is not None and j.benches)
    data = job.to_json()
    # a second concurrency on the same deployment, as a row of several gives (the pinned rows hold one each)
    second = {**data["benches"][0], "max_concurrency": 2, "result_filename": "second_conc2.json"}
    data["benches"] = [{**data["benches"][0], "max_seconds": 2}, {**second, "max_seconds": 2}]
    (tmp_path / JOB_FILE).write_text(json.dumps(data))
    args = ("run", "--job", JOB_FILE, "--base-url", mock_url, "--store", "r.db")
    r = _servelab(*args, cwd=tmp_path, env={AGENTIC_TRACE_ENV: str(TRACE)})
    assert r.returncode == 0, r.stdout + r.stderr
    with Store.open(str(tmp_path / "r.db")) as store:
        [run] = store.list_runs()
        assert run.outcome == "pass"
        stages = [s for s in store.stages(run.id) if s.stage == "bench"]
        assert len(stages) == 2
        concs = []
        for stage in stages:
            result = json.loads(store.artifact_path(run.id, stage.artifact).read_text())
            concs.append(result["agentic"]["replay"]["max_concurrency"])
            assert sum(t["completed"] for t in result["agentic"]["per_turn"]) > 0
        assert sorted(concs) == [1, 2]
