"""Fake ops for testing the collector's plumbing without a GPU (executors, resume, errors, acceptance).

Latencies come from the roofline of h200_sxm and are marked backend="fake": a campaign run with this suite
is a test fixture, never a table. Keys listed in FAIL raise the error they name, to exercise error capture.
"""

import os
import time

from servelab.collect.ops import BENCH
from servelab.collect.suite import OpSuite
from servelab.perfdb.ops import COMM_OPS
from servelab.perfdb.roofline import Roofline
from servelab.specs import load_system

FAIL_ENV = "SERVELAB_FAKE_FAIL"  # comma-separated "op:field=value" triggers, e.g. "gemm:m=4096"
CRASH_ENV = "SERVELAB_FAKE_CRASH"  # same syntax: the worker process dies (os._exit) on that key
# same syntax: rank 0 of a collective takes 1.5 s on that key (what a busy machine does to the rank that
# reports, while the others, the fake barrier holding none, run through the list and end)
SLOW_RANK0_ENV = "SERVELAB_FAKE_SLOW_RANK0"


def _matches(key, spec: str) -> bool:
    for item in filter(None, spec.split(",")):
        op, _, cond = item.partition(":")
        field, _, value = cond.partition("=")
        if key.op == op and str(getattr(key, field, None)) == value:
            return True
    return False


def bench(key) -> dict:
    if _matches(key, os.environ.get(CRASH_ENV, "")):
        os._exit(3)
    if _matches(key, os.environ.get(FAIL_ENV, "")):
        raise MemoryError(f"fake out of memory for {key}")
    us = Roofline(load_system("h200_sxm")).latency(key).us
    return {
        "latency_us": us,
        "p10_us": us * 0.98,
        "p90_us": us * 1.03,
        "reps": 20,
        "inner": 1,
        "timing": "fake",
        "backend": "fake",
        "pid": os.getpid(),
    }


def bench_comm(key, rank: int, group) -> dict:
    if rank == 0 and _matches(key, os.environ.get(SLOW_RANK0_ENV, "")):
        time.sleep(1.5)
    out = bench(key)
    out["rank"] = rank
    return out


def init_worker(device_index: int) -> None:
    os.environ["SERVELAB_FAKE_DEVICE"] = str(device_index)


def init_comm(rank: int, world: int, port: int, sizes) -> dict:
    return {g: None for g in sizes}


def close_comm() -> None:
    return None


def barrier() -> None:
    return None


def classify(exc: BaseException) -> str:
    return "oom" if isinstance(exc, MemoryError) else "error"


def after_error() -> None:
    return None


def facts() -> dict:
    return {"gpu_name": "fake", "gpu_count": 0, "torch": None}


def fake_suite() -> OpSuite:
    p = "fakeops:"  # by import path: tests/collect is on the path of every test and worker process
    return OpSuite(
        bench={op: p + ("bench_comm" if op in COMM_OPS else "bench") for op in BENCH},
        worker_init=p + "init_worker",
        comm_init=p + "init_comm",
        comm_close=p + "close_comm",
        barrier=p + "barrier",
        classify=p + "classify",
        after_error=p + "after_error",
        facts=p + "facts",
        name="fake",
    )
