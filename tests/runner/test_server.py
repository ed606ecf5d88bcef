"""ServerProcess against a tiny Python HTTP server standing in for an engine: healthy start, early exit,
never healthy, and a teardown that leaves no process of the group behind on any of those paths."""

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pidstate import running
from portpick import free_port

from servelab.runner.server import ServerProcess, ServerStartError, group_members, wait_group_gone

# The stand-in engine: `mode` says how it behaves. Like vLLM's API server it forks a worker (the "engine
# core") that shares its process group, and writes the worker's pid where the test can find it.
ENGINE = textwrap.dedent(
    """
    import http.server, os, signal, subprocess, sys, time
    port, mode, pid_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(pid_file, "w").write(str(worker.pid))
    print("engine starting", mode, flush=True)
    if mode == "exit":
        print("engine: bad model config", flush=True)
        sys.exit(3)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    status = 503 if mode == "sick" else 200

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    """
)


def engine(tmp_path: Path, mode: str, **kw) -> tuple[ServerProcess, Path]:
    script, pid_file = tmp_path / "engine.py", tmp_path / "worker.pid"
    script.write_text(ENGINE)
    port = free_port(18950, 19000)
    argv = [sys.executable, str(script), str(port), mode, str(pid_file)]
    server = ServerProcess(argv, f"http://127.0.0.1:{port}", tmp_path / "engine.log", **kw)
    return server, pid_file


def assert_all_gone(server: ServerProcess, pid_file: Path) -> None:
    assert server.pid is not None
    assert not group_members(server.pid)
    assert not running(server.pid)
    worker = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while running(worker) and time.monotonic() < deadline:  # a zombie is reaped by init eventually
        time.sleep(0.05)
    assert not running(worker)


def test_healthy_server_runs_until_the_block_ends(tmp_path):
    server, pid_file = engine(tmp_path, "ok")
    with server:
        assert server.healthy()
        assert server.pid is not None and running(server.pid)
        assert running(int(pid_file.read_text()))
    assert_all_gone(server, pid_file)
    assert "engine starting ok" in server.log_tail()


def test_early_exit_raises_with_the_log_tail(tmp_path):
    server, pid_file = engine(tmp_path, "exit")
    with pytest.raises(ServerStartError, match="exited with 3") as err:
        server.start()
    assert "engine: bad model config" in str(err.value)
    assert str(tmp_path / "engine.log") in str(err.value)
    assert_all_gone(server, pid_file)  # the forked worker outlived its parent: the group teardown got it


@pytest.mark.timeout(120)  # a hang guard, not a speed check
def test_never_healthy_times_out_with_the_log_tail(tmp_path):
    server, pid_file = engine(tmp_path, "sick", start_timeout_s=2.0)
    with pytest.raises(ServerStartError, match="not healthy after 2 s") as err:
        server.start()
    assert "engine starting sick" in str(err.value)
    assert_all_gone(server, pid_file)


@pytest.mark.timeout(120)  # a hang guard, not a speed check
def test_teardown_kills_a_server_that_ignores_sigterm(tmp_path):
    server, pid_file = engine(tmp_path, "stubborn", stop_timeout_s=1.0)
    server.start()
    server.stop()
    assert server.proc is not None and server.proc.returncode == -signal.SIGKILL
    assert_all_gone(server, pid_file)
    server.stop()  # a second stop is harmless


def test_an_error_inside_the_block_still_tears_down(tmp_path):
    server, pid_file = engine(tmp_path, "ok")
    with pytest.raises(RuntimeError, match="test failed"), server:
        raise RuntimeError("test failed")
    assert_all_gone(server, pid_file)


# A leader that leaves a member behind in its group and exits: the member runs until its stdin (the test's
# pipe) closes.
LEAVES_A_MEMBER = (
    "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'])"
)


@pytest.mark.timeout(120)  # a hang guard, not a speed check
def test_a_wait_on_a_group_ends_when_its_last_member_has_exited_not_its_leader():
    leader = subprocess.Popen(
        [sys.executable, "-c", LEAVES_A_MEMBER], stdin=subprocess.PIPE, start_new_session=True
    )
    assert leader.stdin is not None
    leader.wait()
    assert group_members(leader.pid)  # the member, still reading
    assert not wait_group_gone(leader.pid, 0.2)
    leader.stdin.close()  # the member reads the end of its input and exits
    assert wait_group_gone(leader.pid, 60)
    assert not group_members(leader.pid)
