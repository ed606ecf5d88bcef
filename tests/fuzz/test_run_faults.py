"""`servelab run` under faults, with real processes: signals during teardown (a second Ctrl-C, SIGTERM after
SIGINT, ...) against a server that ignores SIGTERM, SIGKILL of servelab itself (mid-benchmark and mid-
teardown), a foreign server already on the port, two `--resume` of one run at once, a resume keeping the first
attempt's server log. No server is left running, no run stays `running` in the store, no other server's
numbers are taken for ours.

The server is a stand-in `vllm` on PATH that serves servelab's mock server (as tests/run does); the tests wait
on what the processes say (log lines, the mock server's request count) with generous hang guards, never on
how fast the machine is.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from fuzzkit import COUNTS, TRACEBACK, tiny_workload

from servelab.results.store import Store
from servelab.runner.server import group_members

SRC = Path(__file__).resolve().parents[2] / "src"
GUARD_S = 180  # a hang guard only: each wait ends as soon as what it waits for happens

FAKE_VLLM = """#!{python}
import os, shlex, signal, sys
with open(os.environ["FAKE_VLLM_PIDFILE"], "a") as f:
    f.write(str(os.getpid()) + "\\n")
if os.environ.get("FAKE_VLLM_IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # kept across exec: the mock server ignores it too
args = sys.argv[1:]
port = args[args.index("--port") + 1]
argv = [sys.executable, "-m", "servelab.bench.mock_server", "--port", port, "--model", args[1]]
os.execv(sys.executable, argv + shlex.split(os.environ.get("FAKE_VLLM_ARGS", "--token-delay-ms 20")))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Setup:
    """A stand-in vllm on PATH, a store, a workload long enough to be interrupted; runs `servelab run`."""

    def __init__(self, tmp_path: Path, **fake: str) -> None:
        self.tmp = tmp_path
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        exe = bin_dir / "vllm"
        exe.write_text(FAKE_VLLM.format(python=sys.executable))
        exe.chmod(0o755)
        self.pidfile = tmp_path / "server.pids"
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(SRC),
            "FAKE_VLLM_PIDFILE": str(self.pidfile),
            **fake,
        }
        self.port = free_port()
        self.db = tmp_path / "store" / "results.db"
        config = {"name": "s", "input_len": 8, "output_len": 10, "num_prompts": 400, "max_concurrency": 2,
                  "args": {"num_warmups": 0}}  # fmt: skip
        self.workload = tiny_workload(tmp_path / "wl.yaml", vllm={"model": "mock-model"},
                                      vllm_bench={"configs": [config]})  # fmt: skip

    def start(self, *extra: str) -> subprocess.Popen:
        COUNTS["tried"] += 1
        argv = [sys.executable, "-m", "servelab.cli.main", "run", str(self.workload), "--port",
                str(self.port), "--store", str(self.db), "--server-stop-timeout", "5", "--json",
                *extra]  # fmt: skip
        return subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def server_groups(self) -> list[int]:
        """The process groups of every server started (each server leads its own)."""
        if not self.pidfile.exists():
            return []
        return [int(x) for x in self.pidfile.read_text().split()]

    def requests(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=2) as r:
                return json.loads(r.read())["requests"]
        except OSError:
            return 0

    def wait_benchmarking(self, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + GUARD_S
        while self.requests() < 3:
            assert proc.poll() is None, f"servelab run ended before the benchmark: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "the benchmark never started"
            time.sleep(0.1)

    def runs(self) -> list[dict]:
        with Store.open(self.db) as store:
            return [{"id": r.id, "outcome": r.outcome} for r in store.list_runs()]


class Lines:
    """stderr read in a thread, line by line, so a test can wait for a line while the process runs."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        try:
            for line in stream:
                with self.cond:
                    self.lines.append(line)
                    self.cond.notify_all()
        except ValueError:  # the test closed the stream (its process is done) while this thread read it
            pass
        with self.cond:
            self.lines.append("")  # end of stream
            self.cond.notify_all()

    def wait_for(self, text: str) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: any(text in x for x in self.lines) or "" in self.lines, GUARD_S)
        assert ok and any(text in x for x in self.lines), f"never saw {text!r}: {''.join(self.lines)}"

    def text(self) -> str:
        with self.cond:
            self.cond.wait_for(lambda: "" in self.lines, GUARD_S)
            return "".join(self.lines)


def gone(groups: list[int]) -> bool:
    return not any(group_members(g) for g in groups)


def wait_gone(groups: list[int]) -> bool:
    deadline = time.monotonic() + GUARD_S
    while not gone(groups):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.fixture
def cleanup():
    """Whatever a failing test leaves running is killed at the end (the assertions say what was left)."""
    groups: list[int] = []
    procs: list[subprocess.Popen] = []
    yield groups, procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    for g in groups:
        try:
            os.killpg(g, signal.SIGKILL)
        except ProcessLookupError:
            pass


SEQUENCES = {
    "int-int": (signal.SIGINT, signal.SIGINT),
    "int-int-int": (signal.SIGINT, signal.SIGINT, signal.SIGINT),
    "int-term": (signal.SIGINT, signal.SIGTERM),
    "term-int": (signal.SIGTERM, signal.SIGINT),
    "term-term": (signal.SIGTERM, signal.SIGTERM),
    "hup-int": (signal.SIGHUP, signal.SIGINT),
}


@pytest.mark.slow  # 6-7 s each: a servelab run, a server and two signals
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(SEQUENCES))
def test_signals_during_teardown_leave_no_server(name, tmp_path, cleanup):
    """The first signal interrupts the benchmark; the others arrive while the server (which ignores SIGTERM)
    is being stopped: the teardown still ends with the server's whole group gone, the run recorded as
    error."""
    first, *more = SEQUENCES[name]
    s = Setup(tmp_path, FAKE_VLLM_IGNORE_TERM="1")
    proc = s.start()
    cleanup[1].append(proc)
    err = Lines(proc.stderr)
    s.wait_benchmarking(proc)
    cleanup[0].extend(s.server_groups())
    proc.send_signal(first)
    err.wait_for("server: stopping")
    for sig in more:
        proc.send_signal(sig)
    out, _ = proc.communicate(timeout=GUARD_S)
    text = err.text()
    assert TRACEBACK not in text, text
    assert proc.returncode == 128 + first, text
    assert gone(s.server_groups()), f"a server was left running after {name}: {text}"
    assert json.loads(out)["outcome"] == "error"
    assert [r["outcome"] for r in s.runs()] == ["error"]


@pytest.mark.slow  # up to 7 s each: a servelab run killed, then resumed
@pytest.mark.timeout(600)
@pytest.mark.parametrize("when", ["benchmarking", "stopping"])
def test_sigkill_of_servelab_leaves_no_server_and_no_running_run(when, tmp_path, cleanup):
    """SIGKILL cannot be caught: the server is torn down by what watches servelab, and the next open of the
    store marks the run as error instead of `running` forever."""
    s = Setup(tmp_path, **({"FAKE_VLLM_IGNORE_TERM": "1"} if when == "stopping" else {}))
    proc = s.start()
    cleanup[1].append(proc)
    err = Lines(proc.stderr)
    s.wait_benchmarking(proc)
    cleanup[0].extend(s.server_groups())
    if when == "stopping":
        proc.send_signal(signal.SIGINT)
        err.wait_for("server: stopping")
    proc.kill()
    proc.wait(GUARD_S)
    assert wait_gone(s.server_groups()), "the server outlived servelab run"
    assert [r["outcome"] for r in s.runs()] == ["error"], "the killed run is still `running`"


def _foreign_http(port: int, tmp_path: Path, env: dict) -> subprocess.Popen:
    argv = [sys.executable, "-m", "servelab.bench.mock_server", "--port", str(port), "--model", "mock-model"]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + GUARD_S
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return p
        except OSError:
            assert p.poll() is None and time.monotonic() < deadline, "the foreign server did not start"
            time.sleep(0.1)


FOREIGN = ["openai-server", "silent-listener", "closing-listener"]


def _close_each_connection(listener: socket.socket) -> None:
    """Accept and close at once, until the test closes the listener (accept then raises: the end)."""
    try:
        for _ in range(1000):
            listener.accept()[0].close()
    except OSError:
        return


@pytest.mark.slow  # 1.3 s of CPU a case: whole servelab runs, killed and resumed
@pytest.mark.timeout(600)
# the listeners that answer no HTTP in the slow tier (a whole servelab run each, 5-12 s): the OpenAI server's
# case keeps the refusal quick, with tests/runner/test_deployment.py's
# test_a_port_in_use_is_refused_before_anything_starts
@pytest.mark.parametrize(
    "kind", [k if k == "openai-server" else pytest.param(k, marks=pytest.mark.slow) for k in FOREIGN]
)
def test_a_foreign_server_on_the_port_is_not_benchmarked(kind, tmp_path, cleanup):
    """Another process already listens on the run's port: the run refuses to start rather than measuring it
    (the stand-in vllm would fail to bind and exit while the other one answered /health)."""
    s = Setup(tmp_path)
    listener = None
    if kind == "openai-server":
        foreign = _foreign_http(s.port, tmp_path, s.env)
        cleanup[1].append(foreign)
    else:
        listener = socket.create_server(("127.0.0.1", s.port))
        if kind == "closing-listener":
            threading.Thread(target=_close_each_connection, args=(listener,), daemon=True).start()
    try:
        proc = s.start()
        cleanup[1].append(proc)
        out, err = proc.communicate(timeout=GUARD_S)
    finally:
        if listener is not None:
            listener.close()
    cleanup[0].extend(s.server_groups())
    assert TRACEBACK not in err, err
    result = json.loads(out)
    assert (proc.returncode, result["outcome"]) == (3, "error"), err
    assert "in use" in " ".join(result["errors"]), result["errors"]
    assert not s.server_groups(), "a server was started on a port another process holds"
    assert gone(s.server_groups())


@pytest.mark.slow  # 3.2 s of CPU a case: whole servelab runs, killed and resumed
@pytest.mark.timeout(600)
def test_two_resumes_of_one_run_do_not_both_run(tmp_path, cleanup):
    s = Setup(tmp_path)
    first = s.start()
    cleanup[1].append(first)
    s.wait_benchmarking(first)
    cleanup[0].extend(s.server_groups())
    [run] = s.runs()
    second = s.start("--resume", run["id"])
    cleanup[1].append(second)
    out, err = second.communicate(timeout=GUARD_S)
    assert TRACEBACK not in err and "internal error" not in err, err
    assert second.returncode == 2 and "--resume" in err and "another" in err, err
    assert len(s.server_groups()) == 1, "the second resume started a server of its own"
    first.send_signal(signal.SIGINT)
    first.communicate(timeout=GUARD_S)
    assert gone(s.server_groups())


# two whole servelab runs: quick, tests/run/test_deployment_run.py::
# test_a_resumed_deployment_logs_to_a_folder_of_its_own
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_resume_keeps_the_first_attempts_server_log(tmp_path, cleanup):
    """The first attempt's server dies mid-benchmark; its log says why, and a resume must not overwrite it."""
    s = Setup(tmp_path, FAKE_VLLM_ARGS="--token-delay-ms 1 --die-after-requests 3")
    config = {"name": "s", "input_len": 8, "output_len": 2, "num_prompts": 6, "max_concurrency": 1,
              "args": {"num_warmups": 0}}  # fmt: skip
    tiny_workload(s.workload, vllm={"model": "mock-model"}, vllm_bench={"configs": [config]})
    first = s.start()
    cleanup[1].append(first)
    out, err = first.communicate(timeout=GUARD_S)
    result = json.loads(out)
    assert result["outcome"] == "error", err
    run_dir = Path(result["run_dir"])
    log = (run_dir / "server.log").read_text()
    assert "dying on purpose" in log
    s.env["FAKE_VLLM_ARGS"] = "--token-delay-ms 1"
    again = s.start("--resume", result["run_id"])
    cleanup[1].append(again)
    out, err = again.communicate(timeout=GUARD_S)
    cleanup[0].extend(s.server_groups())
    assert json.loads(out)["outcome"] == "pass", err
    assert (run_dir / "server.log").read_text() == log, "the resume overwrote the first attempt's log"
    assert len(list(run_dir.glob("server*.log"))) == 2
    assert gone(s.server_groups())
