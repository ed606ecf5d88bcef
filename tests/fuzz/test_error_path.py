"""The one error path of `servelab` (cli/main.py), through a subprocess of the real CLI: every failure is one
line and never a traceback; an unexpected exception names itself (exit 1) and SERVELAB_DEBUG=1 shows its
traceback; a user path that is missing, a directory or unreadable is `error: <path>: <reason>` (exit 2); a
closed stdout (`| head`) ends quietly; Ctrl-C exits 130; usage errors stay click's (exit 2)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fuzzkit import COUNTS, TRACEBACK

SRC = Path(__file__).resolve().parents[2] / "src"

# A command that raises what the test asks for, registered on the real root (the lazy one `servelab` runs,
# so no other command module is imported: 0.4 s a process, not the 1.2 s of the app with every command),
# which main() then runs: the error path is main()'s, whatever the command.
RAISER = """
import os, sys
from servelab.cli import main as m
app = m.root_app()
@app.command("boom")
def boom(kind: str) -> None:
    if kind == "internal":
        raise ValueError("bad\\nthing")
    if kind == "missing":
        open("/nonexistent/dir/file.yaml")
    if kind == "isdir":
        open(os.getcwd())
    if kind == "notdir":
        open(os.path.join(sys.executable, "x"))
    if kind == "denied":
        raise PermissionError(13, "Permission denied", "/root/secret.yaml")
    if kind == "full":
        raise OSError(28, "No space left on device", "/results/run.json")
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "wait":
        print("ready", flush=True)
        import time; time.sleep(120)
    if kind == "pipe":
        for _ in range(100_000):
            print("x" * 100)
m.main(app)
"""


def servelab(*args: str, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
    COUNTS["tried"] += 1
    full_env = {k: v for k, v in os.environ.items() if k != "SERVELAB_DEBUG"}
    full_env.update({"PYTHONPATH": str(SRC), **(env or {})})
    return subprocess.run(
        [sys.executable, "-c", RAISER, *args], env=full_env, capture_output=True, text=True, timeout=120, **kw
    )


def test_unexpected_exception_is_one_line_exit_1():
    r = servelab("boom", "internal")
    assert r.returncode == 1
    assert TRACEBACK not in r.stderr
    assert r.stderr == (
        "error: internal error: ValueError: bad\\nthing (set SERVELAB_DEBUG=1 for the traceback; please "
        "report it)\n"
    )


def test_debug_shows_the_traceback():
    r = servelab("boom", "internal", env={"SERVELAB_DEBUG": "1"})
    assert r.returncode == 1
    assert TRACEBACK in r.stderr and "ValueError: bad" in r.stderr
    assert r.stderr.splitlines()[-1].startswith("error: internal error: ValueError")


@pytest.mark.parametrize(
    ("kind", "expected", "code"),
    [
        ("missing", "error: /nonexistent/dir/file.yaml: No such file or directory", 2),
        ("isdir", ": Is a directory", 2),
        ("notdir", ": Not a directory", 2),
        ("denied", "error: /root/secret.yaml: Permission denied", 2),
        ("full", "error: /results/run.json: No space left on device", 1),
    ],
)
def test_os_errors_name_the_path(kind, expected, code):
    r = servelab("boom", kind)
    assert r.returncode == code, r.stderr
    assert TRACEBACK not in r.stderr
    assert len(r.stderr.splitlines()) == 1 and expected in r.stderr, r.stderr


def test_keyboard_interrupt_exits_130():
    r = servelab("boom", "interrupt")
    assert r.returncode == 130
    assert TRACEBACK not in r.stderr


def test_closed_stdout_ends_quietly():
    """`servelab ... | head -1`: the reader goes away; no traceback, no message, no crash code."""
    COUNTS["tried"] += 1
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    p = subprocess.Popen(
        [sys.executable, "-c", RAISER, "boom", "pipe"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(60) == 1
    assert err == ""


def test_sigint_exits_130():
    """A real Ctrl-C (SIGINT) while a command runs: exit 130, no traceback."""
    COUNTS["tried"] += 1
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    p = subprocess.Popen(
        [sys.executable, "-c", RAISER, "boom", "wait"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.readline() == b"ready\n"  # inside the command, past start-up
    p.send_signal(signal.SIGINT)
    err = p.stderr.read().decode()
    assert p.wait(60) == 130, err
    assert TRACEBACK not in err


@pytest.mark.parametrize(
    "args",
    [("nosuchcommand",), ("memory",), ("memory", "llama-3.1-8b", "--tp", "x"), ("plan", "--nosuchflag")],
    ids=["command", "argument", "value", "flag"],
)
def test_usage_errors_stay_click_usage_errors(args):
    COUNTS["tried"] += 1
    r = subprocess.run(
        [sys.executable, "-m", "servelab.cli.main", *args],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert TRACEBACK not in r.stderr
    assert "Usage:" in r.stderr and "Error:" in r.stderr
