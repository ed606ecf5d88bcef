"""Real vLLM (CPU build) for e2e tests, built from nothing: a tiny random-weight Llama and a byte-level BPE
tokenizer trained here (servelab.runner.tiny_llama), served by servelab.runner.vllm_cpu.VllmCpuServer.

Fixtures: `vllm_venv_python` (session, the vLLM venv's python: $SERVELAB_VLLM_VENV, else <repo>/.venv-vllm),
`tiny_llama` (session, model dir), `vllm_server` (package, a running server on that model).
Every test here is marked e2e and is skipped with the reason when the vLLM venv is missing; in CI, which
installs it while the tests run, the fixture waits for its install to end first (tests/background_setups.py).
Set up the venv with scripts/setup_vllm_cpu.sh.
"""

import os
from pathlib import Path

import pytest
from background_setups import MARKERS_ENV, environment_or_skip
from once_a_run import once_a_run

from servelab.runner.tiny_llama import build_tiny_llama
from servelab.runner.vllm_cpu import QUICK_START_ARGS, QUICK_START_ENV, VENV_ENV, VllmCpuServer, vllm_python

REPO = Path(__file__).resolve().parents[2]
DEFAULT_VENV = REPO / ".venv-vllm"


MISSING = (
    f"vLLM CPU venv not found (set {VENV_ENV} or run scripts/setup_vllm_cpu.sh to create {DEFAULT_VENV})"
)


def pytest_collection_modifyitems(config, items):
    if os.environ.get(MARKERS_ENV):
        return  # being installed as the tests run: the fixture waits for it, and skips if it failed
    if vllm_python(DEFAULT_VENV) is not None:
        return
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=MISSING))


@pytest.fixture(scope="session")
def e2e_cache_dir() -> Path:
    d = Path(os.environ.get("SERVELAB_E2E_CACHE") or REPO / ".cache" / "e2e")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="session")
def vllm_venv_python() -> Path:
    return environment_or_skip("vllm", lambda: vllm_python(DEFAULT_VENV), MISSING)


@pytest.fixture(scope="session")
def tiny_llama(vllm_venv_python, e2e_cache_dir) -> Path:
    """Built once a run, however many pytest-xdist workers ask (never twice into one folder at once)."""
    return once_a_run("tiny-llama", lambda: build_tiny_llama(vllm_venv_python, e2e_cache_dir))


@pytest.fixture(scope="package")
def vllm_server(vllm_venv_python, tiny_llama):
    """Prefix caching on (vLLM's default on the CPU, named so the agentic test's cache hits do not rest on a
    default): one server for the bench, agentic and simulator tests, not one more start for the agentic.
    Stopped once its worker leaves tests/e2e: its tests are one pytest-xdist unit (tests/conftest.py), and an
    idle server kept to the run's end held 2 GiB and a few per cent of a core for ten minutes."""
    args = ["--enable-prefix-caching", *QUICK_START_ARGS]
    with VllmCpuServer(vllm_venv_python, tiny_llama, extra_args=args, env=QUICK_START_ENV) as server:
        yield server
