"""`servelab run` starts the bench's load worker processes once and every bench of the run uses them; each
bench sends what a bench on processes of its own sends (the same warm-ups, prompts and schedule) and
measures the same requests; a run that fails or is interrupted leaves no worker process behind."""

import json
import multiprocessing as mp
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace

import pytest
from portpick import free_port

from servelab.bench import config as bench_config
from servelab.bench import runner
from servelab.bench.processes import WorkerPool
from servelab.recipes.workload import parse_workload
from servelab.recipes.yamlio import read_yaml
from servelab.results.store import Store
from servelab.run.execute import RunOptions, execute
from servelab.run.plan import from_workload
from servelab.run.stage import StageName, Target
from servelab.run.stages import BenchStage, run_bench, stage_registry

pytestmark = pytest.mark.timeout(300)  # hang guard only


@pytest.fixture
def mock_url():
    """The mock server in its own process (1 ms a token); its URL."""
    port = free_port(18600, 18700)
    proc = subprocess.Popen(
        [sys.executable, "-m", "servelab.bench.mock_server", "--port", str(port), "--token-delay-ms", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            if _requests(url) is not None:
                break
            assert proc.poll() is None, "the mock server exited"
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def started(monkeypatch) -> list[int]:
    """The pids of the worker processes pools start, in order."""
    pids: list[int] = []
    start = WorkerPool._start

    def counted(pool):
        w = start(pool)
        pids.append(w.proc.pid)
        return w

    monkeypatch.setattr(WorkerPool, "_start", counted)
    return pids


def _requests(url: str) -> int | None:
    """How many requests the mock server has received (None: it does not answer yet)."""
    try:
        with urllib.request.urlopen(url + "/stats", timeout=2) as r:
            return json.loads(r.read())["requests"]
    except OSError:
        return None


def _plan(tmp_path, write_workload):
    """Two configs (one worker at concurrency 1, two at concurrency 4) of 3 repetitions: 6 benches, each
    with warm-ups at its own concurrency."""
    path = write_workload(
        tmp_path / "wl.yaml",
        vllm_bench={"configs": [{"name": "s", "input_len": 16, "output_len": 4, "num_prompts": [6, 20],
                                 "max_concurrency": [1, 4], "repetitions": 3,
                                 "args": {"num_warmups": 3, "num_workers": 2}}]},
    )  # fmt: skip
    return from_workload(parse_workload(read_yaml(path), str(path)), str(path))


class Seen:
    """What each bench gave its worker processes and got back (runner.run_load, spied on)."""

    def __init__(self, monkeypatch) -> None:
        self.benches: list[dict] = []
        self.real = runner.run_load
        monkeypatch.setattr(runner, "run_load", self.run_load)

    def run_load(self, cfg, items, specs, merged_path, **kw):
        sent: list[tuple] = []

        def tee(bare):
            for it in items(bare):
                sent.append((it.key, it.payload, it.offset))
                yield it

        load = self.real(cfg, tee, specs, merged_path, **kw)
        self.benches.append(
            {
                "pids": [s["pid"] for s in load.summaries],
                "specs": [replace(s, out_path="") for s in specs],  # warm-ups, ready check, limits, shares
                "sent": sent,
                "records": sorted((r["i"], r["w"], r["ok"], r["in"], r["out"]) for r in load.records),
            }
        )
        return load


@pytest.mark.slow  # 3.1 s of CPU a case: a whole servelab run with its server processes
def test_the_benches_of_a_run_share_one_pool_and_measure_what_fresh_processes_do(
    tmp_path, write_workload, mock_url, monkeypatch, started
):
    plan = _plan(tmp_path, write_workload)
    seen = Seen(monkeypatch)
    # each bench's own random X-Request-Id prefix (vLLM's default) would be the one difference in the bytes
    monkeypatch.setattr(bench_config, "_request_id_prefix", lambda: "bench-fixed-")
    before = _requests(mock_url)
    with Store.open(tmp_path / "results.db") as store:
        result = execute(plan, store, RunOptions(base_url=mock_url, model="mock-model"))
    assert (result.outcome, result.exit_code) == ("pass", 0), result.errors
    pooled_requests = _requests(mock_url) - before
    pooled = seen.benches
    assert [len(b["pids"]) for b in pooled] == [1, 1, 1, 2, 2, 2]
    # two processes started for the whole run (the second when the first 2-worker bench came), then reused
    assert len(started) == 2 and all(b["pids"] == started[: len(b["pids"])] for b in pooled)
    assert not mp.active_children()  # shut down with the run

    # the same benches, each on processes of its own, as before the pool
    seen.benches = []
    before = _requests(mock_url)
    target = Target(mock_url, "mock-model")
    for _, config, rep in plan.items():
        point = next(p for p in plan.bench if p.config == config)
        out = tmp_path / "fresh" / f"{config}-{rep}"
        out.mkdir(parents=True)
        run_bench(target, point, rep, out)
    fresh = seen.benches
    assert _requests(mock_url) - before == pooled_requests  # ready checks, warm-ups and the requests
    assert len(started) == 2 + 9  # 1 + 1 + 1 + 2 + 2 + 2 processes, each bench its own
    assert {p for b in fresh for p in b["pids"]}.isdisjoint(started[:2])
    for a, b in zip(pooled, fresh, strict=True):
        assert a["specs"] == b["specs"] and a["sent"] == b["sent"] and a["records"] == b["records"]
        assert a["sent"] and len(a["records"]) == len(a["sent"])


def test_a_run_that_fails_after_a_bench_leaves_no_worker_process(tmp_path, write_workload, mock_url):
    plan = _plan(tmp_path, write_workload)
    calls: list[str] = []

    class Fails(BenchStage):
        name = StageName.BENCH

        def run(self, target, call):
            calls.append(call.config)
            if len(calls) == 4:  # after three benches (the pool has started), a failure no stage expects
                assert mp.active_children()
                raise RuntimeError("unforeseen")
            return super().run(target, call)

    with Store.open(tmp_path / "results.db") as store, pytest.raises(RuntimeError, match="unforeseen"):
        execute(
            plan, store, RunOptions(base_url=mock_url, model="mock-model"), registry=stage_registry(Fails)
        )
    assert len(calls) == 4
    assert not mp.active_children()


@pytest.mark.slow  # 2.4 s of CPU a case: a whole servelab run with its server processes
def test_a_bench_whose_ready_check_fails_gives_the_next_one_fresh_processes(
    tmp_path, write_workload, started
):
    """Nothing listens: every bench fails its ready check; each leaves its processes in an unknown state,
    so the pool starts new ones for the next, and none is left after the run."""
    plan = _plan(tmp_path, write_workload)
    url = f"http://127.0.0.1:{free_port(18600, 18700)}"
    with Store.open(tmp_path / "results.db") as store:
        result = execute(plan, store, RunOptions(base_url=url, model="mock-model"))
    assert result.exit_code == 3
    assert [r.status for r in result.rows] == ["error"] * 6
    assert all("initial test request" in r.detail for r in result.rows)
    assert len(started) == 1 + 1 + 1 + 2 + 2 + 2 and len(set(started)) == 9
    assert not mp.active_children()
