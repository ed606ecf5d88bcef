"""Settings for the whole test session."""

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.cachedir import ENV_DIR
from servelab.perfdb import price_cache
from servelab.perfdb.db import PerfDB
from servelab.perfdb.price_cache import ENV_SWITCH as PRICE_CACHE_SWITCH

SRC = str(Path(__file__).resolve().parents[1] / "src")


def pytest_configure(config):
    """The Ctrl-C tests send SIGINT to the processes they start. A shell without job control starts a
    background command (`pytest ... &`) with SIGINT ignored, which its children would inherit across exec
    (Python then installs no KeyboardInterrupt handler): a handler here gives them the default again."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def table_cache_of_the_session(tmp_path_factory):
    """Read tables are cached in the session's temporary directory, not the user's cache (the variable is
    inherited by the CLI processes tests start). Prices are not kept across processes: a test that patches how
    a price is computed must see its patch, not an answer an earlier process kept (tests/perfdb/
    test_price_cache.py turns them on)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_DIR, str(tmp_path_factory.mktemp("servelab-cache")))
        mp.setenv(PRICE_CACHE_SWITCH, "0")
        yield


@pytest.fixture(autouse=True)
def no_inherited_columns(monkeypatch):
    """Piped tables fit COLUMNS when it is set (a CI log's width); a test that wants a width sets it.
    Without this, a developer's exported COLUMNS, or pytest-xdist's workers (COLUMNS=80), cut the tables
    tests read."""
    monkeypatch.delenv("COLUMNS", raising=False)


# Tests that share one session's real server or built model run on one pytest-xdist worker (`--dist
# loadgroup`, as .ci/run runs them): a parallel run starts one CPU vLLM and one PostgreSQL, not one a worker,
# and never builds the tiny model's cache folder twice at once.
SHARED_BY_FIXTURE = {
    "vllm_server": "vllm-cpu",
    "tiny_llama": "vllm-cpu",
    "vllm_venv_python": "vllm-cpu",
    "postgres_server": "postgres",
}


def pytest_collection_modifyitems(items):
    for item in items:
        uses = set(getattr(item, "fixturenames", ()))
        group = next((g for fixture, g in SHARED_BY_FIXTURE.items() if fixture in uses), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """A pytest-xdist worker is done: add the hostile inputs it tried (tests/fuzz/conftest.py)."""
    config, tried = node.config, getattr(node, "workeroutput", {}).get("fuzz_tried", 0)
    config.fuzz_tried = getattr(config, "fuzz_tried", 0) + tried


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    tried = getattr(config, "fuzz_tried", 0)
    if not tried:
        return
    stats = terminalreporter.stats
    xfailed = len(stats.get("xfailed", []))
    failed = len([r for r in stats.get("failed", []) if "tests/fuzz" in r.nodeid])
    terminalreporter.write_line(
        f"fuzz: {tried} hostile inputs tried; {xfailed} xfail pending (fixed in other branches); "
        f"{failed} failed"
    )


@pytest.fixture()
def prices(tmp_path, monkeypatch, request):
    """The price cache on, in a directory of the test's own (tests/conftest turns it off for every other
    test); every PerfDB made anew before and after. Its value is the directory the prices are kept in."""
    monkeypatch.setenv(ENV_DIR, str(tmp_path / "cache"))
    monkeypatch.setenv(PRICE_CACHE_SWITCH, "1")
    PerfDB.clear_shared()
    request.addfinalizer(PerfDB.clear_shared)
    request.addfinalizer(price_cache._PENDING.clear)  # nothing of the test's written at the session's exit
    return tmp_path / "cache" / "prices"


@pytest.fixture
def mock_url():
    """servelab's mock OpenAI server (model `mock-model`) in a process of its own, on a free port; its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "servelab.bench.mock_server", "--port", str(port), "--model", "mock-model"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    assert proc.stdout is not None and "listening" in proc.stdout.readline()
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)
