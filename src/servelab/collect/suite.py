"""An OpSuite names, by import path, the functions a worker process runs: so executors can hand it to spawned
processes and Ray tasks as plain data, and tests can swap the GPU ops for fake ones without torch."""

import importlib
from typing import NamedTuple

from servelab.collect.ops import BENCH


class OpSuite(NamedTuple):
    bench: dict[str, str]  # op -> "module:function"(key) -> timing dict; comm ops take (key, rank, group)
    worker_init: str  # (device_index) -> None
    comm_init: str  # (rank, world, port, sizes) -> {group size: group handle}
    comm_close: str  # () -> None, leaves the process group comm_init joined
    barrier: str  # () -> None, waits for every rank of the process group
    classify: str  # (exception) -> error class
    after_error: str  # () -> None, frees what a failed op left behind
    facts: str  # () -> dict of software/hardware versions for provenance.json
    name: str = "gpu"


def resolve(path: str):
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def gpu_suite() -> OpSuite:
    p = "servelab.collect.ops.runtime:"
    return OpSuite(
        bench=BENCH,
        worker_init=p + "init_worker",
        comm_init=p + "init_comm",
        comm_close=p + "close_comm",
        barrier=p + "barrier",
        classify=p + "classify",
        after_error=p + "after_error",
        facts=p + "facts",
    )
