"""A server started as an argv list in its own process group, waited on until healthy, torn down as a group.

The group matters: engines fork workers (vLLM's engine core is a child of its API server), and killing the
leader alone leaves them holding the port and the memory."""

import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections import deque
from pathlib import Path
from typing import IO, Self


class ServerStartError(RuntimeError):
    """The server exited or never became healthy; the message ends with the last lines of its log."""


def free_port(lo: int, hi: int) -> int:
    """The first port in [lo, hi) that 127.0.0.1 can bind now."""
    for port in range(lo, hi):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {lo}-{hi - 1}")


class ServerProcess:
    """`argv` run with `env` (the whole environment), stdout and stderr to `log_path`; healthy when
    `url + health_path` answers 200. A context manager: started on enter, stopped on exit."""

    def __init__(
        self,
        argv: list[str],
        url: str,
        log_path: Path,
        env: dict[str, str] | None = None,
        health_path: str = "/health",
        start_timeout_s: float = 300.0,
        stop_timeout_s: float = 30.0,
        cwd: Path | None = None,
    ) -> None:
        self.argv, self.url, self.log_path = list(argv), url, Path(log_path)
        self.env = env
        self.cwd = cwd  # where the engine finds files it was given by relative path
        self.health_path = health_path
        self.start_timeout_s, self.stop_timeout_s = start_timeout_s, stop_timeout_s
        self.proc: subprocess.Popen | None = None
        self._log: IO[str] | None = None

    @property
    def pid(self) -> int | None:
        """The leader's pid, which is also the process group id."""
        return self.proc.pid if self.proc else None

    def start(self) -> Self:
        """Start the process and wait until healthy; on any failure the group is gone before the raise."""
        self._log = open(self.log_path, "w")  # held for the server's lifetime, closed in stop()
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
            self._wait_healthy(self.proc)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ServerStartError(
                    f"{self.argv[0]} exited with {proc.returncode} before it was healthy; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if self.healthy():
                return
            time.sleep(0.5)
        raise ServerStartError(
            f"{self.argv[0]} not healthy after {self.start_timeout_s:.0f} s; log {self.log_path}:\n"
            f"{self.log_tail()}"
        )

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + self.health_path, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(deque(f, maxlen=lines))
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM to the whole group, SIGKILL to what is left after stop_timeout_s; safe to call twice."""
        if self.proc is not None:
            pgid = self.proc.pid
            deadline = time.monotonic() + self.stop_timeout_s
            _signal_group(pgid, signal.SIGTERM)
            while group_members(pgid) and time.monotonic() < deadline:
                self.proc.poll()  # reap the leader as soon as it exits
                time.sleep(0.1)
            _signal_group(pgid, signal.SIGKILL)
            self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # nothing left in the group


def group_members(pgid: int) -> list[int]:
    """The running (not zombie) processes of a process group. A zombie has exited: its parent has not read
    its status yet (for children of a killed leader, an init that does not reap, as in some containers)."""
    if not os.path.isdir(
        "/proc"
    ):  # not Linux: the group counts as running while any member, zombie or not, is
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        return [pgid]
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited while listing
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members
