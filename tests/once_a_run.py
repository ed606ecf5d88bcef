"""A value computed once in a test run, however many pytest-xdist workers ask for it: the first worker
computes it and keeps it in the run's shared temporary folder, the others wait for it and read it back
(expanding the pinned InferenceX sweep takes 3-6 s of CPU, its launch conformance as long again). Without
workers it is simply computed. The value must pickle and must only be read."""

from __future__ import annotations

import fcntl
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# the run's folder every worker sees (pytest's base temporary folder's parent), set by tests/conftest.py
SHARED: list[Path] = []


def share_between_workers(folder: Path) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        SHARED[:] = [folder]


def once_a_run(name: str, compute: Callable[[], T]) -> T:
    if not SHARED:
        return compute()
    kept = SHARED[0] / f"{name}.pickle"
    with open(SHARED[0] / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes; a worker that died holds nothing
        if kept.exists():
            return pickle.loads(kept.read_bytes())
        value = compute()
        kept.write_bytes(pickle.dumps(value))
        return value
