"""A deployment of several processes on this machine (side processes, prefill/decode/worker servers, a router)
started as one: each is a runner.server.ServerProcess (its own process group, log and watchdog), started in
the order given; one health gate over all of them with one deadline; one teardown of every group.

If any process exits before the whole deployment is healthy, everything is stopped and the start fails in one
line naming that process (role, index, argv[0]) with the tail of its log. Teardown sends SIGTERM to every
group in reverse start order, waits one grace period for all of them together, then SIGKILLs what is left, on
success, failure and Ctrl-C alike (a second Ctrl-C during the wait still ends with the SIGKILL)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from servelab.runner.server import ServerProcess, ServerStartError, port_in_use

LOCALHOST = "127.0.0.1"
PROGRESS_EVERY_S = 30.0  # how often the gate repeats what it waits for when nothing changes


@dataclass(frozen=True)
class DeployedProcess:
    """One process of a deployment as the runner starts it: `env` is its whole environment (None: this
    process's), `port` None for a process with no HTTP endpoint, `health_path` None for one not asked."""

    role: str
    index: int  # among the processes of its role, 0 first
    argv: list[str]
    env: dict[str, str] | None = None
    port: int | None = None
    health_path: str | None = "/health"
    node: int = 0
    gpus: int = 0

    @property
    def name(self) -> str:
        return f"{self.role} {self.index}"

    @property
    def log_name(self) -> str:
        return f"{self.role}-{self.index}.log"

    @property
    def url(self) -> str | None:
        return None if self.port is None else f"http://{LOCALHOST}:{self.port}"

    @property
    def gated(self) -> bool:
        """Whether the health gate asks it (it has a port and a health path)."""
        return self.port is not None and self.health_path is not None


class DeploymentStartError(ServerStartError):
    """A process of the deployment exited, or the deployment was not healthy by its deadline."""


class LocalDeployment:
    """The processes of a deployment on this host; a context manager like ServerProcess (started on enter,
    stopped on exit). Logs go to `log_dir`/<role>-<index>.log."""

    def __init__(
        self,
        processes: Sequence[DeployedProcess],
        log_dir: Path,
        *,
        cwd: Path | None = None,
        start_timeout_s: float = 300.0,
        stop_timeout_s: float = 30.0,
        say: Callable[[str], None] | None = None,
    ) -> None:
        if not processes:
            raise ValueError("a deployment has at least one process")
        self.specs = list(processes)
        self.log_dir, self.cwd = Path(log_dir), cwd
        self.start_timeout_s, self.stop_timeout_s = start_timeout_s, stop_timeout_s
        self.say = say or (lambda text: None)
        self.started: list[tuple[DeployedProcess, ServerProcess]] = []

    def start(self) -> Self:
        """Start every process in order, then wait for all to be healthy; on any failure (or Ctrl-C) every
        group is gone before the raise."""
        for spec in self.specs:  # all checked before any starts
            if spec.port is not None and port_in_use(LOCALHOST, spec.port):
                raise DeploymentStartError(
                    f"{spec.name} ({spec.argv[0]}): port {spec.port} is already in use by another process: "
                    "servelab benchmarks only the deployment it starts"
                )
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            for spec in self.specs:
                server = ServerProcess(
                    spec.argv,
                    spec.url,
                    self.log_dir / spec.log_name,
                    env=spec.env,
                    health_path=spec.health_path,
                    stop_timeout_s=self.stop_timeout_s,
                    cwd=self.cwd,
                )
                try:
                    server.spawn()
                except ServerStartError as e:
                    raise DeploymentStartError(f"{spec.name} ({spec.argv[0]}): {e}") from None
                self.started.append((spec, server))
                self.say(f"started {spec.name}: {spec.argv[0]} (log {server.log_path})")
            self._gate()
        except BaseException:
            self.stop()
            raise
        return self

    def _gate(self) -> None:
        """Wait until every gated process answers 200 on its health path, failing at the first exit."""
        deadline = time.monotonic() + self.start_timeout_s
        waiting = [(spec, server) for spec, server in self.started if spec.gated]
        said, said_at = "", 0.0
        while True:
            note = self.exit_note("before the deployment was healthy")
            if note:
                raise DeploymentStartError(note)
            waiting = [(spec, server) for spec, server in waiting if not server.healthy()]
            if not waiting:
                self.say(f"all {len(self.started)} processes up")
                return
            gated = sum(spec.gated for spec, _ in self.started)
            progress = f"{gated - len(waiting)}/{gated} healthy; waiting for " + ", ".join(
                spec.name for spec, _ in waiting
            )
            if progress != said or time.monotonic() - said_at > PROGRESS_EVERY_S:
                self.say(progress)
                said, said_at = progress, time.monotonic()
            if time.monotonic() > deadline:
                spec, server = waiting[0]
                raise DeploymentStartError(
                    f"{spec.name} ({spec.argv[0]}) not healthy after {self.start_timeout_s:.0f} s "
                    f"({progress}); log {server.log_path}:\n{server.log_tail()}"
                )
            time.sleep(0.5)

    def exit_note(self, when: str = "") -> str | None:
        """One line naming the first process that has exited (role, index, argv[0], status; `when`: during
        what) and its log's tail; None while all run."""
        for spec, server in self.started:
            code = server.exit_code()
            if code is not None:
                return (
                    f"{spec.name} ({spec.argv[0]}) exited with {code}{' ' + when if when else ''}; "
                    f"log {server.log_path}:\n{server.log_tail()}"
                )
        return None

    @property
    def log_path(self) -> Path:
        """The folder of the processes' logs."""
        return self.log_dir

    @property
    def pids(self) -> list[int]:
        """The process group ids, in start order."""
        return [server.pid for _, server in self.started if server.pid is not None]

    def stop(self) -> None:
        """SIGTERM to every group in reverse start order, one grace period for all, SIGKILL to what is left;
        safe to call twice."""
        servers = [server for _, server in reversed(self.started)]
        try:
            for server in servers:
                server.terminate()
            deadline = time.monotonic() + self.stop_timeout_s
            while any(server.running() for server in servers) and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            _kill_all(servers)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _kill_all(servers: list[ServerProcess]) -> None:
    """kill() each, the rest still killed when one of them raises (a second Ctrl-C while reaping)."""
    if servers:
        try:
            servers[0].kill()
        finally:
            _kill_all(servers[1:])
