"""AIConfigurator comes from an environment that already has it (the `[aic]` extra here, or `--aic-python
PATH`); servelab never installs it. Without either, the answer is one line saying how to get it. The other
environment is played here by a stand-in python (a shell script) that answers servelab's probe and logs how
it was called, so the tests also see that nothing asks it to install anything."""

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
from clirun import servelab

from servelab.calibrate import aic
from servelab.errors import ServelabError


def stand_in_python(tmp_path: Path, version: str | None, has_estimator: bool = True) -> Path:
    """An executable that answers aic's probe like a python whose environment has aiconfigurator-core
    `version` (None: not installed), with a silicon_sample.csv in its package folder; every call is logged."""
    package = tmp_path / "site-packages" / "aiconfigurator_core"
    (package / "systems").mkdir(parents=True)
    (package / "systems" / "silicon_sample.csv").write_text("id,backend\n")
    log = tmp_path / "calls.log"
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    answers = {"aiconfigurator-core": version, "aiconfigurator": version if has_estimator else None}
    cases = "\n".join(
        f"  {dist}) echo {v}; echo {package if dist == 'aiconfigurator-core' else tmp_path}; exit 0 ;;"
        for dist, v in answers.items()
        if v
    )
    python.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\ncase "$3" in\n{cases}\nesac\n'
        "echo 'ModuleNotFoundError: No module named x' >&2\nexit 1\n"
    )
    python.chmod(0o755)
    return python


def calls(tmp_path: Path) -> str:
    return (tmp_path / "calls.log").read_text()


def test_a_named_python_gives_the_pinned_sample_and_installs_nothing(tmp_path):
    python = stand_in_python(tmp_path, aic.AIC_VERSION)
    path, version, chosen = aic.aic_csv(python)
    assert path == tmp_path / "site-packages" / "aiconfigurator_core" / "systems" / "silicon_sample.csv"
    assert version == aic.AIC_VERSION and chosen == aic.AicPython(python, "--aic-python")
    assert "aiconfigurator-core" in calls(tmp_path) and "pip" not in calls(tmp_path)


@pytest.mark.parametrize(
    ("version", "says"), [("0.11.0", "has aiconfigurator-core 0.11.0"), (None, "has no aiconfigurator-core")]
)
def test_a_named_python_without_the_pinned_version_is_one_line(tmp_path, version, says):
    python = stand_in_python(tmp_path, version)
    with pytest.raises(ServelabError) as err:
        aic.aic_csv(python)
    message = err.value.flag_message()
    assert "\n" not in message and message.startswith("--aic-python: ")
    assert says in message and "servelab[aic]" in message and aic.AIC_VERSION in message
    assert "pip" not in calls(tmp_path)


def test_the_estimator_is_checked_before_the_fit(tmp_path, monkeypatch):
    monkeypatch.setattr(aic, "CACHE", tmp_path / "cache")
    python = stand_in_python(tmp_path, aic.AIC_VERSION, has_estimator=False)
    with pytest.raises(ServelabError, match="has no aiconfigurator;"):
        aic.estimator_for(["row1"], "h200_sxm", python)
    with_it = stand_in_python(tmp_path / "other", aic.AIC_VERSION)
    assert aic.estimator_for(["row1"], "h200_sxm", with_it) == aic.AicPython(with_it, "--aic-python")


def test_with_every_answer_cached_nothing_runs_and_nothing_is_needed(tmp_path, monkeypatch):
    monkeypatch.setattr(aic, "CACHE", tmp_path)
    aic.predictions_cache("h200_sxm").write_text(json.dumps({"row1": {"ttft_ms": 1.0, "tpot_ms": 1.0}}))
    missing = tmp_path / "no-such-python"
    assert aic.estimator_for(["row1"], "h200_sxm", missing) is None
    answers = aic.aic_predictions([{"id": "row1"}], "h200_sxm", None)
    assert answers == {"row1": {"ttft_ms": 1.0, "tpot_ms": 1.0}}


def calibrate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return servelab("calibrate", "engines", "--dry-run", *args, cwd=tmp_path)  # in-process (tests/clirun.py)


@pytest.mark.skipif(
    importlib.util.find_spec("aiconfigurator_core") is not None,
    reason="the [aic] extra is installed here, so the calibration would find AIConfigurator",
)
def test_without_the_extra_or_a_python_the_command_says_how_in_one_line(tmp_path):
    done = calibrate(tmp_path)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "pip install 'servelab[aic]'" in line and "--aic-python PATH" in line and "--csv FILE" in line
    assert not (tmp_path / ".cache").exists()  # no environment made, nothing installed


def test_a_python_that_is_not_there_is_one_line(tmp_path):
    done = calibrate(tmp_path, "--aic-python", str(tmp_path / "nope" / "python"))
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f"error: --aic-python: {tmp_path / 'nope' / 'python'} is not an executable file (a python)"
    )
