"""One pool of worker processes for several benches (processes.py): the processes serve bench after bench,
the pool grows to the largest, replaces processes that died between benches, and leaves none behind."""

import multiprocessing as mp
import os
import signal
from pathlib import Path

import pytest

from servelab.bench.agentic.run import run_trace_point
from servelab.bench.agentic.trace import read_trace_file
from servelab.bench.config import BenchConfig
from servelab.bench.processes import WorkerPool
from servelab.bench.runner import run_point

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "inferencex" / "agentic" / "traces.jsonl"


def _cfg(url: str, concurrency: int, workers: int) -> BenchConfig:
    return BenchConfig(
        base_url=url,
        model="mock",
        num_prompts=12,
        random_input_len=8,
        random_output_len=4,
        max_concurrency=concurrency,
        num_workers=workers,
        num_warmups=2,
        live=False,
    )


def _run(cfg: BenchConfig, pool: WorkerPool | None = None):
    with open(os.devnull, "w") as out:
        result, _, code = run_point(cfg, out=out, pool=pool)
    assert code == 0 and result.summary.completed == 12
    return result


def test_benches_share_the_processes_and_the_pool_grows_to_the_largest(mock_server):
    url = mock_server("--token-delay-ms", "1").url
    with WorkerPool() as pool:
        _run(_cfg(url, 1, 1), pool)
        first = [w.proc.pid for w in pool.workers]
        _run(_cfg(url, 4, 2), pool)
        second = [w.proc.pid for w in pool.workers]
        _run(_cfg(url, 2, 1), pool)
        assert len(first) == 1 and second[:1] == first and len(second) == 2
        assert [w.proc.pid for w in pool.workers] == second and pool.started == 2
    assert not mp.active_children()


@pytest.mark.slow  # 1.2 s of CPU a case: a whole bench with its load worker processes
def test_a_process_killed_between_benches_is_replaced(mock_server):
    url = mock_server("--token-delay-ms", "1").url
    with WorkerPool() as pool:
        _run(_cfg(url, 2, 2), pool)
        before = [w.proc.pid for w in pool.workers]
        os.kill(before[1], signal.SIGKILL)
        pool.workers[1].proc.join(30)
        _run(_cfg(url, 2, 2), pool)
        after = [w.proc.pid for w in pool.workers]
        assert len(after) == 2 and not set(after) & set(before)
    assert not mp.active_children()


def test_a_bench_of_its_own_leaves_no_process(mock_server):
    url = mock_server("--token-delay-ms", "1").url
    _run(_cfg(url, 2, 2))
    assert not mp.active_children()


@pytest.mark.slow  # 1.1 s of CPU a case: a whole bench with its load worker processes
def test_a_trace_replay_and_a_plain_bench_take_turns_on_the_same_processes(mock_server):
    url = mock_server("--token-delay-ms", "1").url
    trace = BenchConfig(
        base_url=url,
        model="mock",
        dataset_name="trace",
        dataset_path=str(SAMPLE),
        trace_max_gap_s=0.01,
        num_workers=1,
        live=False,
    )
    with WorkerPool() as pool, open(os.devnull, "w") as out:
        replays = [run_trace_point(trace, out=out, pool=pool)]
        _run(_cfg(url, 2, 1), pool)
        replays.append(run_trace_point(trace, out=out, pool=pool))
        assert pool.started == 1
    assert [code for _, _, code in replays] == [0, 0]
    planned = sum(t.num_requests for t in read_trace_file(str(SAMPLE)).traces)
    assert [r.summary.completed for r, _, _ in replays] == [planned, planned]
    assert not mp.active_children()
