"""`servelab run` starting a stand-in `vllm` (the mock server, tests/run/conftest.py): a real start, health
wait, bench in-process and teardown. A server that never becomes healthy, one killed mid-benchmark, and
SIGTERM / Ctrl-C mid-benchmark: each ends as error, keeps what was measured and leaves nothing running."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from portpick import free_port

from servelab.recipes.workload import parse_workload
from servelab.recipes.yamlio import read_yaml
from servelab.results.store import Store
from servelab.run.execute import RunOptions, execute
from servelab.run.plan import from_workload
from servelab.runner.server import group_members

pytestmark = pytest.mark.timeout(300)  # hang guard only


def _plan(path, port, **kw):
    return from_workload(parse_workload(read_yaml(path), str(path)), str(path), port=port, **kw)


def _gone(pidfile) -> bool:
    return not group_members(int(pidfile.read_text()))


def test_a_started_server_is_benchmarked_stored_and_torn_down(tmp_path, fake_vllm, write_workload):
    port = free_port(18600, 18700)
    path = write_workload(tmp_path / "wl.yaml", vllm={"model": "mock-model", "env": {"HF_TOKEN": "hf_x"}})
    plan = _plan(path, port, assertions=["bench.completed >= 4", "bench[s-conc-2].failed == 0"])
    with Store.open(tmp_path / "results.db") as store:
        result = execute(plan, store, RunOptions(server_timeout_s=60))
        assert (result.outcome, result.exit_code) == ("pass", 0), result.errors
        run = store.get_run(result.run_id)
        assert run.provenance.server_argv[:3] == ["vllm", "serve", "mock-model"]
        # the H200 profile's env and HF_HOME under the workload's, as perf-eval's runner sets them
        assert run.provenance.env == {
            "VLLM_DEEP_GEMM_WARMUP": "skip",
            "HF_TOKEN": "<redacted>",
            "HF_HOME": "/mnt/shared/hf-models",
        }
        assert run.provenance.host
        stages = {(s.stage, s.config): s for s in store.stages(run.id)}
        assert stages[("server", "")].status == "pass" and stages[("server", "")].artifact == "server.log"
        bench = stages[("bench", "s-conc-2")]
        data = json.loads((result.run_dir / bench.artifact).read_text())
        assert data["completed"] == 6 and data["max_concurrency"] == 2  # vllm bench serve's fields
        completed = [m.value for m in store.metrics(run.id) if m.name == "completed"]
        assert sorted(completed) == [4.0, 6.0]
    assert [j.outcome for j in result.judged] == ["pass", "pass"]
    assert (result.run_dir / "server.log").exists()
    assert _gone(fake_vllm)


@pytest.mark.parametrize(
    "mode, says", [("exit", "exited with 3 before it was healthy"), ("hang", "not healthy after")]
)
def test_a_server_that_never_gets_healthy(tmp_path, fake_vllm, write_workload, monkeypatch, mode, says):
    monkeypatch.setenv("FAKE_VLLM_MODE", mode)
    plan = _plan(write_workload(tmp_path / "wl.yaml"), free_port(18600, 18700))
    with Store.open(tmp_path / "results.db") as store:
        result = execute(plan, store, RunOptions(server_timeout_s=3))
        assert (result.outcome, result.exit_code) == ("error", 3)
        [error] = result.errors
        assert says in error
        assert (
            "CUDA error: fake out of memory" if mode == "exit" else "compiling forever"
        ) in error  # its log
        statuses = {(s.stage, s.config): s.status for s in store.stages(result.run_id)}
        assert statuses.pop(("server", "")) == "error" and set(statuses.values()) == {"skipped"}
    assert _gone(fake_vllm)


def test_the_server_killed_mid_benchmark(tmp_path, fake_vllm, write_workload, monkeypatch):
    # the ready check and 2 warm-ups come first; the server dies during its 6th request
    monkeypatch.setenv("FAKE_VLLM_ARGS", "--token-delay-ms 2 --die-after-requests 6")
    path = write_workload(
        tmp_path / "wl.yaml",
        vllm_bench={"configs": [{"name": "s", "input_len": 8, "output_len": 4, "num_prompts": 12,
                                 "max_concurrency": [1, 2], "args": {"num_warmups": 2}}]},
    )  # fmt: skip
    with Store.open(tmp_path / "results.db") as store:
        result = execute(_plan(path, free_port(18600, 18700)), store, RunOptions(server_timeout_s=60))
        assert (result.outcome, result.exit_code) == ("error", 3)
        first, second = result.rows
        assert first.status == "error" and "requests failed or were not sent" in first.detail
        assert second.status == "skipped" and "server had exited" in second.detail
        assert "the server exited" in result.errors[0]
        measured = {m.name: m.value for m in store.metrics(result.run_id) if m.config == "s-conc-1"}
        assert measured["completed"] >= 1 and measured["failed"] + measured.get("not_sent", 0) >= 1
        assert store.get_run(result.run_id).outcome == "error"
    assert _gone(fake_vllm)


def _stats(port: int) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=2) as r:
            return json.loads(r.read())
    except OSError:
        return {}


def _spawned(pid: int) -> list[int]:
    """The processes multiprocessing spawned under `pid` (its direct children, from /proc)."""
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(c) for c in (task / "children").read_text().split()]
    return [k for k in kids if b"spawn_main" in _cmdline(k)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    """Alive and not a zombie (a hang guard waits for the end of a dying one)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state == "Z":
            return False
        time.sleep(0.1)
    return True


# SIGINT's whole run (2-9 s) in the slow tier: SIGTERM's case keeps the same teardown path quick
@pytest.mark.slow  # 2.1 s of CPU a case: a whole servelab run with its server processes
@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_a_signal_mid_benchmark_tears_down_and_keeps_what_was_measured(tmp_path, fake_vllm, write_workload,
                                                                        monkeypatch, sig):  # fmt: skip
    monkeypatch.setenv("FAKE_VLLM_ARGS", "--token-delay-ms 20")
    port = free_port(18600, 18700)
    path = write_workload(
        tmp_path / "wl.yaml",
        vllm_bench={"configs": [{"name": "s", "input_len": 8, "output_len": 10, "num_prompts": 400,
                                 "max_concurrency": 2, "args": {"num_warmups": 2}}]},
    )  # fmt: skip
    db = tmp_path / "results.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "servelab.cli.main", "run", str(path), "--port", str(port), "--store", str(db),
         "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=os.environ.copy(),
    )  # fmt: skip
    # wait until measured requests have completed: ready check + 2 warm-ups + 4 more requests sent
    while _stats(port).get("requests", 0) < 7:
        assert proc.poll() is None, "servelab run ended before the benchmark ran"
        time.sleep(0.1)
    workers = _spawned(proc.pid)  # the bench's load worker processes
    assert workers
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig
    assert not [p for p in workers if _alive(p)]
    result = json.loads(out)
    assert result["outcome"] == "error" and result["errors"] == [f"interrupted by {sig.name}"]
    [row] = result["stages"]
    assert (row["status"], row["detail"]) == ("error", "interrupted")
    with Store.open(db) as store:
        run = store.get_run(result["run_id"])
        assert run.outcome == "error"
        measured = {m.name: m.value for m in store.metrics(run.id) if m.stage == "bench"}
        assert 1 <= measured["completed"] < 400
    assert _gone(fake_vllm)


FAKE_DOCKER = """#!{python}
# Stands in for `docker`: records its argv; `run` serves the mock server on the --port the engine was given.
import json, os, sys
with open(os.environ["FAKE_DOCKER_CALLS"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1] == "run":
    port = sys.argv[sys.argv.index("--port") + 1]
    os.execv(sys.executable, [sys.executable, "-m", "servelab.bench.mock_server", "--port", port,
                              "--token-delay-ms", "1", "--model", "mock-model"])
"""


def test_docker_runs_the_pinned_image_and_removes_the_container(
    tmp_path, fake_vllm, write_workload, monkeypatch
):
    docker = tmp_path / "bin" / "docker"
    docker.write_text(FAKE_DOCKER.format(python=sys.executable))
    docker.chmod(0o755)
    calls = tmp_path / "docker.calls"
    monkeypatch.setenv("FAKE_DOCKER_CALLS", str(calls))
    image = "vllm/vllm-openai:v1@sha256:" + "b" * 64
    path = write_workload(tmp_path / "wl.yaml", vllm={"model": "mock-model", "image": image, "env": {"A": 1}})
    with Store.open(tmp_path / "results.db") as store:
        result = execute(
            _plan(path, free_port(18600, 18700)), store, RunOptions(docker=True, server_timeout_s=60)
        )
        assert result.exit_code == 0, result.errors
        assert store.get_run(result.run_id).provenance.image_digest == image
    run, *rest = [json.loads(line) for line in calls.read_text().splitlines()]
    container = f"servelab-run-{result.run_id}"
    assert run[:4] == ["run", "--rm", "--name", container] and image in run and "A=1" in run
    assert rest == [["rm", "-f", container]]  # torn down by name, whatever became of the client
