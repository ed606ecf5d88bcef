"""Count the hostile inputs the fuzz suite tried (fuzzkit.COUNTS) for the session's summary; the mock_server
fixture.

The harness lives in fuzzkit.py: a test module's `from conftest import ...` could find another folder's
conftest, since the tests folders are not packages."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fuzzkit import COUNTS

SRC = Path(__file__).resolve().parents[2] / "src"


def pytest_sessionfinish(session) -> None:
    """The count for the session's summary (tests/conftest.py prints it); a pytest-xdist worker hands it to
    the controller, which adds the workers' counts."""
    session.config.fuzz_tried = getattr(session.config, "fuzz_tried", 0) + COUNTS["tried"]
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["fuzz_tried"] = COUNTS["tried"]


@pytest.fixture
def mock_server():
    """servelab's mock OpenAI server in a process of its own, on a free port (1 ms a token); its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    argv = [sys.executable, "-m", "servelab.bench.mock_server", "--port", str(port), "--token-delay-ms", "1"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120  # hang guard only: it is up as soon as it answers
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "the mock server did not start"
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(60)
