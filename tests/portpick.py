"""Ports for test servers that parallel test workers never share: worker k of n takes only the ports of a
range that are k modulo n. A port found free is not bound until its server starts (and a test's stand-in
that hangs never binds it), so two workers drawing from one range could otherwise both take it."""

from __future__ import annotations

import os
import secrets
import socket


def worker_slot() -> tuple[int, int]:
    """(this worker's index, the number of workers); (0, 1) outside pytest-xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0
    return index % max(count, 1), max(count, 1)


def free_port(lo: int = 18100, hi: int = 18900) -> int:
    """A port of [lo, hi) that is this worker's and 127.0.0.1 can bind now, tried from a random one on."""
    index, count = worker_slot()
    mine = [p for p in range(lo, hi) if p % count == index]
    start = secrets.randbelow(len(mine))
    for port in mine[start:] + mine[:start]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port of this worker in {lo}-{hi - 1}")
