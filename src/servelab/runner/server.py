"""A server started as an argv list in its own process group, waited on until healthy, torn down as a group.

The group matters: engines fork workers (vLLM's engine core is a child of its API server), and killing the
leader alone leaves them holding the port and the memory. The port must be free before the server starts:
a server that dies on bind while another process answers on its port would otherwise be benchmarked as that
other one. A watchdog process (runner/watchdog.py) tears the group down if servelab itself is killed."""

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import deque
from pathlib import Path
from typing import IO, Self
from urllib.parse import urlsplit

# SIGKILL cannot be caught or ignored: only a process stuck in the kernel (uninterruptible I/O, a GPU driver)
# outlives it by more than a moment, and teardown does not wait on such a one for longer than this.
KILLED_GONE_WITHIN_S = 10.0
GROUP_POLL_S = 0.05  # how often a wait on a process group reads /proc (each scan costs milliseconds of CPU)


class ServerStartError(RuntimeError):
    """The server exited or never became healthy; the message ends with the last lines of its log."""


def port_in_use(host: str, port: int) -> bool:
    """Whether a process already accepts connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def _package_root() -> str:
    """The folder holding the servelab package, for a child python that must import it."""
    return str(Path(__file__).resolve().parents[2])


def free_port(lo: int, hi: int) -> int:
    """A port in [lo, hi) that 127.0.0.1 can bind now, tried from a random one onwards: two processes that ask
    at once (parallel test workers, two runs on one machine) would both get the first free one, and one of
    their servers would fail to bind it."""
    start = secrets.randbelow(hi - lo)  # the OS's randomness: a seeded `random` repeats in every process
    for port in (lo + (start + i) % (hi - lo) for i in range(hi - lo)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {lo}-{hi - 1}")


class ServerProcess:
    """`argv` run with `env` (the whole environment), stdout and stderr to `log_path`; healthy when
    `url + health_path` answers 200 (no url or no health_path: while it runs). A context manager: started
    on enter, stopped on exit."""

    def __init__(
        self,
        argv: list[str],
        url: str | None,
        log_path: Path,
        env: dict[str, str] | None = None,
        health_path: str | None = "/health",
        start_timeout_s: float = 300.0,
        stop_timeout_s: float = 30.0,
        cwd: Path | None = None,
        orphan_cleanup: list[str] | None = None,
    ) -> None:
        self.argv, self.url, self.log_path = list(argv), url, Path(log_path)
        self.env = env
        self.cwd = cwd  # where the engine finds files it was given by relative path
        self.health_path = health_path
        self.start_timeout_s, self.stop_timeout_s = start_timeout_s, stop_timeout_s
        self.orphan_cleanup = orphan_cleanup  # what the watchdog runs after the group when servelab is gone
        self.proc: subprocess.Popen | None = None
        self._log: IO[str] | None = None
        self._watchdog: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        """The leader's pid, which is also the process group id."""
        return self.proc.pid if self.proc else None

    def start(self) -> Self:
        """Start the process and wait until healthy; on any failure the group is gone before the raise. A
        port another process already answers on is refused before anything starts."""
        self.spawn()
        try:
            if self.proc is not None:  # spawn() set it, or raised
                self._wait_healthy(self.proc)
        except BaseException:
            self.stop()
            raise
        return self

    def spawn(self) -> Self:
        """Start the process (and its watchdog) without waiting for it to be healthy: a deployment starts
        several, then waits for all of them at once. On failure nothing is left running."""
        if self.url is not None:
            u = urlsplit(self.url)
            host, port = u.hostname or "127.0.0.1", u.port or (443 if u.scheme == "https" else 80)
            if port_in_use(host, port):
                raise ServerStartError(
                    f"port {port} on {host} is already in use by another process: servelab benchmarks only "
                    "the server it starts (stop the other one or choose another --port)"
                )
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
            self._watchdog = self._start_watchdog(self.proc.pid)
        except BaseException:
            self.stop()
            raise
        return self

    def exit_code(self) -> int | None:
        """The leader's exit status once it has exited; None while it runs (or before it started)."""
        return None if self.proc is None else self.proc.poll()

    def exit_note(self, when: str = "") -> str | None:
        """One line saying the server has exited (`when`: during what) and its log's tail; None while it
        runs."""
        code = self.exit_code()
        if code is None:
            return None
        during = f" {when}" if when else ""
        return f"the server exited with {code}{during}; log {self.log_path}:\n{self.log_tail()}"

    def _start_watchdog(self, pgid: int) -> subprocess.Popen | None:
        """The process that stops the group if this one dies without doing it (runner/watchdog.py)."""
        argv = [sys.executable, "-m", "servelab.runner.watchdog", str(pgid), str(self.stop_timeout_s)]
        argv += ["--", *self.orphan_cleanup] if self.orphan_cleanup else []
        path = os.pathsep.join(p for p in (_package_root(), os.environ.get("PYTHONPATH")) if p)
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": path},
                start_new_session=True,
            )
        except OSError:
            return None  # no watchdog: servelab's own teardown still runs on every path it survives

    def _release_watchdog(self) -> None:
        """Tell the watchdog the group is down, so it leaves without signalling anything."""
        dog, self._watchdog = self._watchdog, None
        if dog is None:
            return
        try:
            if dog.stdin is not None:
                dog.stdin.write(b"done")
                dog.stdin.close()
            dog.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            dog.kill()
            dog.wait()

    def _wait_healthy(self, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ServerStartError(
                    f"{self.argv[0]} exited with {proc.returncode} before it was healthy; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if self.healthy() and proc.poll() is None:  # and still ours: not another process's answer
                return
            time.sleep(0.5)
        raise ServerStartError(
            f"{self.argv[0]} not healthy after {self.start_timeout_s:.0f} s; log {self.log_path}:\n"
            f"{self.log_tail()}"
        )

    def healthy(self) -> bool:
        if self.url is None or self.health_path is None:
            return self.exit_code() is None and self.proc is not None  # nothing to ask: up while it runs
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
        """SIGTERM to the whole group, SIGKILL to what is left after stop_timeout_s; safe to call twice. An
        interruption while waiting (a second Ctrl-C) still ends with the SIGKILL."""
        try:
            self.terminate()
            deadline = time.monotonic() + self.stop_timeout_s
            while self.running() and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            self.kill()

    def terminate(self) -> None:
        """SIGTERM to the group (the first half of stop())."""
        if self.proc is not None:
            signal_group(self.proc.pid, signal.SIGTERM)

    def running(self) -> bool:
        """Whether any process of the group still runs; reaps the leader once it has exited."""
        if self.proc is None:
            return False
        self.proc.poll()
        return bool(group_members(self.proc.pid))

    def kill(self) -> None:
        """SIGKILL to what is left of the group, the leader reaped, the group gone, the watchdog released, the
        log closed (the second half of stop()); safe to call twice."""
        if self.proc is not None:
            try:
                signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                # The leader's exit says nothing of its group: a forked worker sent the same SIGKILL may not
                # have run yet to die (a loaded machine), and would still hold the port and the memory.
                wait_group_gone(self.proc.pid, KILLED_GONE_WITHIN_S)
            finally:
                self._release_watchdog()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # nothing left in the group


def wait_group_gone(pgid: int, timeout_s: float) -> bool:
    """Wait until no process of the group runs (zombies have exited); whether it was gone by the deadline."""
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(GROUP_POLL_S)
    return True


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
