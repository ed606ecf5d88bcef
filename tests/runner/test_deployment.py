"""LocalDeployment against stand-in engines (test_server.py's, each forking a worker into its process group):
one health gate over all processes, a process dying before the gate names itself, a deadline, a port in
use, teardown of every group (a SIGTERM-ignoring one included) on success, failure, Ctrl-C and servelab's own
death: nothing is left running."""

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from portpick import free_port
from test_server import ENGINE, running

from servelab.runner.deployment import DeployedProcess, DeploymentStartError, LocalDeployment
from servelab.runner.server import group_members

pytestmark = pytest.mark.timeout(120)  # hang guard only
SRC = str(Path(__file__).resolve().parents[2] / "src")
# a side process: no port, runs until stopped (a stand-in for etcd or NATS)
SIDE = "import time\nprint('side up', flush=True)\nwhile True: time.sleep(1)\n"


def process(tmp_path: Path, role: str, index: int, mode: str, port: int) -> DeployedProcess:
    """A stand-in engine as one process of a deployment; its forked worker's pid goes to
    <role>-<index>.pid."""
    script = tmp_path / "engine.py"
    script.write_text(ENGINE)
    pid_file = tmp_path / f"{role}-{index}.pid"
    argv = [sys.executable, str(script), str(port), mode, str(pid_file)]
    return DeployedProcess(role, index, argv, port=port)


def side(tmp_path: Path) -> DeployedProcess:
    (tmp_path / "side.py").write_text(SIDE)
    return DeployedProcess(
        "side", 0, [sys.executable, str(tmp_path / "side.py")], port=None, health_path=None
    )


def free_ports(n: int) -> list[int]:
    """n distinct ports free now (free_port alone may answer the same one twice)."""
    ports: list[int] = []
    while len(ports) < n:
        if (port := free_port(19100, 19400)) not in ports:
            ports.append(port)
    return ports


def workers_and_router(tmp_path: Path, modes=("ok", "ok", "ok")) -> list[DeployedProcess]:
    ports = free_ports(3)
    return [
        side(tmp_path),
        process(tmp_path, "worker", 0, modes[0], ports[0]),
        process(tmp_path, "worker", 1, modes[1], ports[1]),
        process(tmp_path, "router", 0, modes[2], ports[2]),
    ]


def forked_workers(tmp_path: Path) -> list[int]:
    return [int(p.read_text()) for p in tmp_path.glob("*.pid") if p.read_text()]


def assert_all_gone(pgids: list[int], workers: list[int]) -> None:
    """Every group is empty once the teardown returns (it waits for that), so each forked worker, a member of
    one, has exited: it is gone or a zombie init has not reaped yet, neither of them running."""
    assert pgids
    for pgid in pgids:
        assert not group_members(pgid), pgid
    assert not [w for w in workers if running(w)]


@pytest.mark.slow  # 0.9 s of CPU a case: process groups started and torn down
def test_every_process_starts_passes_one_gate_and_goes(tmp_path):
    said: list[str] = []
    procs = workers_and_router(tmp_path)
    dep = LocalDeployment(procs, tmp_path / "logs", say=said.append)
    with dep:
        pgids = dep.pids
        assert len(pgids) == 4 and all(group_members(p) for p in pgids)
        assert [s.name for s, _ in dep.started] == ["side 0", "worker 0", "worker 1", "router 0"]
        assert all(server.healthy() for _, server in dep.started)
        workers = forked_workers(tmp_path)
        assert len(workers) == 3 and all(running(w) for w in workers)
    assert_all_gone(pgids, workers)
    logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert logs == ["router-0.log", "side-0.log", "worker-0.log", "worker-1.log"]
    assert "side up" in (tmp_path / "logs" / "side-0.log").read_text()
    assert said[-1] == "all 4 processes up"


def test_a_process_that_dies_before_the_gate_stops_all_and_names_itself(tmp_path):
    procs = workers_and_router(tmp_path, modes=("ok", "exit", "ok"))
    dep = LocalDeployment(procs, tmp_path / "logs")
    with pytest.raises(DeploymentStartError) as err:
        dep.start()
    text = str(err.value)
    assert text.startswith(f"worker 1 ({sys.executable}) exited with 3 before the deployment was healthy")
    assert "engine: bad model config" in text and str(tmp_path / "logs" / "worker-1.log") in text
    assert_all_gone(dep.pids, forked_workers(tmp_path))


@pytest.mark.slow  # 0.8 s of CPU a case: process groups started and torn down
def test_a_deployment_not_healthy_by_its_deadline_names_what_it_waited_for(tmp_path):
    said: list[str] = []
    procs = workers_and_router(tmp_path, modes=("ok", "ok", "sick"))
    dep = LocalDeployment(procs, tmp_path / "logs", start_timeout_s=2.0, say=said.append)
    with pytest.raises(DeploymentStartError, match=r"router 0 \(.*\) not healthy after 2 s \(2/3 healthy"):
        dep.start()
    assert any(s.startswith("2/3 healthy; waiting for router 0") for s in said)
    assert_all_gone(dep.pids, forked_workers(tmp_path))


def test_a_port_in_use_is_refused_before_anything_starts(tmp_path):
    procs = workers_and_router(tmp_path)
    with socket_listening(procs[3].port):
        with pytest.raises(DeploymentStartError, match=f"router 0 .*port {procs[3].port} is already in use"):
            LocalDeployment(procs, tmp_path / "logs").start()
    assert not forked_workers(tmp_path)  # no worker was started


def socket_listening(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


@pytest.mark.slow  # 1.1 s of CPU a case: process groups started and torn down
def test_teardown_kills_a_group_that_ignores_sigterm_after_one_grace(tmp_path):
    procs = workers_and_router(tmp_path, modes=("stubborn", "ok", "ok"))
    dep = LocalDeployment(procs, tmp_path / "logs", stop_timeout_s=1.0)
    dep.start()
    pgids, workers = dep.pids, forked_workers(tmp_path)
    dep.stop()
    codes = {s.name: server.proc.returncode for s, server in dep.started if server.proc}
    assert codes["worker 0"] == -signal.SIGKILL and codes["worker 1"] == -signal.SIGTERM
    assert_all_gone(pgids, workers)
    dep.stop()  # a second stop is harmless


# A servelab stand-in: starts the deployment of the given process list, writes its pgids, waits.
HOLDER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from servelab.runner.deployment import DeployedProcess, LocalDeployment
    procs = [DeployedProcess(**p) for p in json.loads(Path(sys.argv[1]).read_text())]
    with LocalDeployment(procs, Path(sys.argv[2]), stop_timeout_s=2.0) as dep:
        Path(sys.argv[3]).write_text(json.dumps(dep.pids))
        while True:
            time.sleep(0.1)
    """
)


def hold(tmp_path: Path, procs: list[DeployedProcess]) -> tuple[subprocess.Popen, list[int]]:
    """The deployment started by another python process; its pgids once it is healthy."""
    spec, pids = tmp_path / "procs.json", tmp_path / "pgids.json"
    spec.write_text(json_of(procs))
    (tmp_path / "holder.py").write_text(HOLDER)
    holder = subprocess.Popen(
        [sys.executable, str(tmp_path / "holder.py"), str(spec), str(tmp_path / "logs"), str(pids)],
        env={**os.environ, "PYTHONPATH": SRC},
    )
    deadline = time.monotonic() + 60
    while not pids.exists() and time.monotonic() < deadline and holder.poll() is None:
        time.sleep(0.1)
    assert pids.exists(), "the deployment did not start"
    return holder, json.loads(pids.read_text())


def json_of(procs: list[DeployedProcess]) -> str:
    return json.dumps([dataclasses.asdict(p) for p in procs])


@pytest.mark.slow  # 1.1 s of CPU a case: process groups started and torn down
def test_ctrl_c_tears_every_group_down(tmp_path):
    holder, pgids = hold(tmp_path, workers_and_router(tmp_path))
    workers = forked_workers(tmp_path)
    assert all(group_members(p) for p in pgids)
    holder.send_signal(signal.SIGINT)
    assert holder.wait(timeout=30) != 0  # KeyboardInterrupt, after the teardown
    assert_all_gone(pgids, workers)


def test_servelab_killed_outright_leaves_nothing_behind(tmp_path):
    holder, pgids = hold(tmp_path, workers_and_router(tmp_path))
    workers = forked_workers(tmp_path)
    holder.kill()  # no teardown runs in it: each process's watchdog does it
    holder.wait()
    deadline = time.monotonic() + 20
    while any(group_members(p) for p in pgids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert_all_gone(pgids, workers)
