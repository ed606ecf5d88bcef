"""A stand-in `vllm` for `servelab run` tests: `vllm serve MODEL --port P ...` starts servelab's mock
OpenAI server on that port (bench/mock_server.py), so the real start, health wait, bench and teardown run.

Its environment steers it: FAKE_VLLM_ARGS (more mock-server options, e.g. --die-after-requests 6),
FAKE_VLLM_MODE=exit (print a log line and exit 3 before healthy) or hang (never listen), and
FAKE_VLLM_PIDFILE (where it writes its pid, which is the server's process group)."""

import os
import sys
from pathlib import Path

import pytest
import yaml

SRC = Path(__file__).resolve().parents[2] / "src"

FAKE_VLLM = """#!{python}
import os, shlex, sys, time
if os.environ.get("FAKE_VLLM_PIDFILE"):
    with open(os.environ["FAKE_VLLM_PIDFILE"], "w") as f:
        f.write(str(os.getpid()))
mode = os.environ.get("FAKE_VLLM_MODE", "")
if mode == "exit":
    print("loading weights", flush=True)
    print("RuntimeError: CUDA error: fake out of memory", flush=True)
    sys.exit(3)
if mode == "hang":
    print("compiling forever", flush=True)
    while True:
        time.sleep(1)
args = sys.argv[1:]
port = args[args.index("--port") + 1]
argv = [sys.executable, "-m", "servelab.bench.mock_server", "--port", port, "--model", args[1]]
os.execv(sys.executable, argv + shlex.split(os.environ.get("FAKE_VLLM_ARGS", "--token-delay-ms 1")))
"""


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch) -> Path:
    """A `vllm` on PATH that serves the mock server; returns its pid file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "vllm"
    exe.write_text(FAKE_VLLM.format(python=sys.executable))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    pidfile = tmp_path / "server.pid"
    monkeypatch.setenv("FAKE_VLLM_PIDFILE", str(pidfile))
    return pidfile


@pytest.fixture
def write_workload():
    return _write_workload


def _write_workload(path: Path, **extra) -> Path:
    """A small workload: the mock model, one bench config at concurrency 1 and 2 (4 and 6 prompts)."""
    data = {
        "name": "tiny",
        "gpu": "H200",
        "vllm": {"model": "mock-model"},
        "vllm_bench": {
            "configs": [
                {
                    "name": "s",
                    "input_len": 16,
                    "output_len": 4,
                    "num_prompts": [4, 6],
                    "max_concurrency": [1, 2],
                }
            ]
        },
    } | extra
    path.write_text(yaml.safe_dump(data))
    return path
