"""The lock a `servelab run` holds on its run folder for as long as it runs.

It answers two questions no store row can: is this run being run right now (a second `--resume` of it is
refused), and did the process running it die without recording how it ended (SIGKILL, a crash: the run is
`running` in the store and nobody holds its lock). The lock is an flock on `runs/<id>/run.lock`, which the
kernel releases whatever way the process ends; the file says who held it last.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from servelab.errors import ServelabError

LOCK_FILE = "run.lock"


class RunBusy(ServelabError):
    """Another process holds the run's lock."""


class RunLock:
    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._fd = path, fd

    @classmethod
    def take(cls, run_dir: Path, run_id: str) -> RunLock:
        """Hold the run's lock, or raise RunBusy naming the process that holds it."""
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise RunBusy(
                f"run {run_id} is being run by another servelab ({holder}); wait for it to end",
                field="resume",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def abandoned(run_dir: Path) -> bool:
    """Whether the run folder has a lock that no process holds: its run ended without saying how. A folder
    without a lock file (a run of an older servelab, an imported one) is not known to be abandoned."""
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)
