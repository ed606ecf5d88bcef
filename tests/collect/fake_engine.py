"""A fake engine for testing the engine collector without a GPU: a catalogue with one entry whose "kernel"
is a Python loop over a list, timed by the collector's own timing loop (collect.timing.time_op) on the host
clock, and the device runtime of the fake op suite (fakeops.py, beside this file) with facts that name an
H200, so the campaign merges into an h200_sxm table. A campaign run with it is a test fixture, never a table.
Workers find it by import path (fake_engine:...): tests/collect is on every test and worker process's path."""

import fakeops

from servelab.collect.engines import Catalogue, KernelEntry
from servelab.collect.timing import HostClock, time_op
from servelab.engines import Engine
from servelab.perfdb.keys import Gemm, OpKey
from servelab.perfdb.ops import OpName

LIB = "vllm/_fake_C.abi3.so"
SRC = "vllm/model_executor/layers/fake_kernel.py"


def plan() -> list[OpKey]:
    return [Gemm(m, 64, 64, "bf16") for m in (1, 2, 4, 8)]


def bench(key, files) -> dict:
    """Sums m x n x k / 4096 numbers in Python: a host-side op whose time grows with the key."""
    values = list(range(max(1, key.m * key.n * key.k // 4096)))

    def run(xs):
        return float(sum(xs))

    t = time_op(lambda: (values,), run, 8 * len(values), clock=HostClock(), graph=False, max_seconds=0.05)
    return {**t, "source_file": files.path(SRC).name if files else None}


ENTRIES = (
    KernelEntry(
        name="fake_gemm",
        ops=(OpName.gemm,),
        backend="fake-engine",
        kernel="a Python loop (test fixture)",
        bench="fake_engine:bench",
        runs=lambda key: isinstance(key, Gemm),
        plan=plan,
        versions=("0.20", "9999"),
        files=(LIB, SRC),
        stand_ins="everything: this is a test fixture",
    ),
    KernelEntry(
        name="fake_pending",
        ops=(OpName.moe,),
        backend="fake-pending",
        kernel="nothing",
        bench="servelab.collect.engines.runtime:pending",
        runs=lambda key: True,
        plan=lambda: [],
        pending="declared only (test fixture)",
    ),
)

CATALOGUE = Catalogue(Engine.VLLM, Engine.VLLM.value, ENTRIES)


def init_worker(device_index: int) -> None:
    fakeops.init_worker(device_index)


def classify(exc: BaseException) -> str:
    return fakeops.classify(exc)


def after_error() -> None:
    fakeops.after_error()


def facts() -> dict:
    return {
        "gpu_name": "NVIDIA H200 (fake engine: host clock)",
        "gpu_count": 0,
        "driver": "none (test fixture)",
        "cuda": "none (test fixture)",
        "torch": "none (test fixture)",
        "clocks": "host perf_counter (test fixture)",
    }


def init_comm(rank: int, world: int, port: int, sizes) -> dict:
    return fakeops.init_comm(rank, world, port, sizes)


def close_comm() -> None:
    fakeops.close_comm()


def barrier() -> None:
    fakeops.barrier()
