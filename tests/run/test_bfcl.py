"""The BFCL stage through the real bfcl-eval (its own environment, scripts/setup_bfcl.sh) against a server
that calls the ground-truth functions of each case and one that calls none."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from answer_server import MODEL, AnswerServer, bfcl_data_dir, load_bfcl_cases
from pidstate import running

from servelab.recipes.workload import WlBfcl
from servelab.run import bfcl
from servelab.run.bfcl import bfcl_python, metrics_from_scores, run_bfcl
from servelab.run.stage import StageFailed, Target

needs_bfcl = pytest.mark.usefixtures("bfcl_env_python")  # skips saying why where there is no BFCL environment
SINGLE = ["simple_python", "multiple", "parallel", "parallel_multiple"]
MULTI = ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"]
# two cases of every single-turn category; multi_turn's 4 split as one per leaf, as perf-eval subsamples
SPEC = WlBfcl(
    test_categories=[*SINGLE, "multi_turn"],
    max_test_cases={**dict.fromkeys(SINGLE, 2), "multi_turn": 4},
    num_threads=4,
)
CASE_IDS = {f"{c}_{i}" for c in SINGLE for i in range(2)} | {f"{leaf}_0" for leaf in MULTI}


@pytest.fixture(scope="module")
def cases(bfcl_env_python):
    return load_bfcl_cases(bfcl_data_dir(bfcl_env_python), CASE_IDS)


@pytest.mark.slow
@needs_bfcl
def test_ground_truth_calls_score_one(cases, tmp_path):
    assert {c.id for c in cases} == CASE_IDS
    with AnswerServer(correct=True, bfcl_cases=cases) as server:
        out = run_bfcl(Target(server.url, MODEL), SPEC, tmp_path)
    for category in [*SINGLE, "multi_turn", *MULTI, "overall"]:
        assert out.metrics[f"{category}.accuracy"] == 1.0, category
    for category in SINGLE:
        assert out.metrics[f"{category}.num_cases"] == 2
    assert out.metrics["multi_turn.num_cases"] == 4
    assert all(out.metrics[f"{leaf}.num_cases"] == 1 for leaf in MULTI)
    assert out.metrics["overall.inference_errors"] == 0
    assert (tmp_path / bfcl.SCORES_FILE).is_file() and (tmp_path / "score").is_dir()


@pytest.mark.slow
@needs_bfcl
def test_no_calls_score_zero(cases, tmp_path):
    with AnswerServer(correct=False, bfcl_cases=cases) as server:
        out = run_bfcl(Target(server.url, MODEL), SPEC, tmp_path)
    for category in [*SINGLE, "multi_turn", "overall"]:
        assert out.metrics[f"{category}.accuracy"] == 0.0, category
    assert out.metrics["overall.inference_errors"] == 0  # answered, wrongly


@pytest.mark.slow
@needs_bfcl
def test_server_down_is_a_stage_failure(tmp_path):
    spec = WlBfcl(test_categories=["simple_python"], max_test_cases=1, num_threads=1)
    with pytest.raises(StageFailed, match=r"bfcl: no case reached an answer .*Connection error"):
        run_bfcl(Target("http://127.0.0.1:9", MODEL), spec, tmp_path)


def test_missing_environment_says_how_to_set_it_up(tmp_path, monkeypatch):
    monkeypatch.setenv(bfcl.PYTHON_ENV, str(tmp_path / "none" / "python"))
    monkeypatch.delenv(bfcl.VENV_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StageFailed, match="setup_bfcl.sh"):
        run_bfcl(Target("http://127.0.0.1:9", MODEL), SPEC, tmp_path / "out")


def test_bfcl_on_path_gives_its_environment(tmp_path, monkeypatch):
    python = tmp_path / "env" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    python.chmod(0o755)
    script = tmp_path / "env" / "bin" / "bfcl"
    script.write_text(f"#!{python}\nprint('bfcl')\n")
    script.chmod(0o755)
    for var in (bfcl.PYTHON_ENV, bfcl.VENV_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "env" / "bin"))
    monkeypatch.chdir(tmp_path)
    assert bfcl_python() == python


def test_group_accuracy_is_the_mean_of_its_leaves():
    result = {
        "leaves": {
            "simple_python": ["simple_python"],
            "multi_turn": ["multi_turn_base", "multi_turn_miss_func"],
        },
        "scores": {
            "simple_python": {"accuracy": 0.5, "correct_count": 1, "total_count": 2},
            "multi_turn_base": {"accuracy": 1.0, "correct_count": 3, "total_count": 3},
            "multi_turn_miss_func": {"accuracy": 0.0, "correct_count": 0, "total_count": 1},
        },
    }
    metrics, units = metrics_from_scores(["simple_python", "multi_turn"], result)
    assert metrics == {
        "simple_python.accuracy": 0.5,
        "simple_python.num_cases": 2.0,
        "multi_turn.accuracy": 0.5,
        "multi_turn.num_cases": 4.0,
        "multi_turn_base.accuracy": 1.0,
        "multi_turn_base.num_cases": 3.0,
        "multi_turn_miss_func.accuracy": 0.0,
        "multi_turn_miss_func.num_cases": 1.0,
        "overall.accuracy": 0.5,
        "overall.inference_errors": 0.0,
    }
    assert units["multi_turn.num_cases"] == "cases"


def test_a_missing_score_is_a_stage_failure():
    result = {"leaves": {"multiple": ["multiple"]}, "scores": {}}
    with pytest.raises(StageFailed, match="no score for multiple"):
        metrics_from_scores(["multiple"], result)


def test_the_driver_gets_the_workload_settings(tmp_path, monkeypatch):
    """The argv and environment the driver runs with, seen by a fake interpreter that records them."""
    record = tmp_path / "argv.json"
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > {record}\n'
        f'printf "%s\\n" "$BFCL_PROJECT_ROOT" "$OPENAI_BASE_URL" "$OPENAI_API_KEY" >> {record}\n'
        "exit 3\n"
    )
    fake.chmod(0o755)
    spec = WlBfcl(
        test_categories=["simple_python", "multi_turn"],
        max_test_cases={"multi_turn": 8},
        num_threads=3,
        temperature=0.5,
        maximum_step_limit=7,
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-user-own-key")
    with pytest.raises(StageFailed, match="exited with code 3"):
        run_bfcl(Target("http://h:8000/", "org/m"), spec, tmp_path / "out", python=fake)
    lines = record.read_text().splitlines()
    assert lines[:2] == ["-I", str(bfcl.DRIVER)]
    args = lines[2:-3]
    assert args == [
        "--model", "org/m", "--category", "simple_python", "--category", "multi_turn",
        "--num-threads", "3", "--temperature", "0.5", "--maximum-step-limit", "7",
        "--max-cases", json.dumps({"multi_turn": 8}), "--out", str(tmp_path / "out" / bfcl.SCORES_FILE),
    ]  # fmt: skip
    # the user's own OpenAI key never goes to the server under test
    assert lines[-3:] == [str(tmp_path / "out"), "http://h:8000/v1", "EMPTY"]


def test_ctrl_c_ends_the_bfcl_process(tmp_path):
    """Ctrl-C during the stage (SIGINT to servelab alone) ends the driver too: nothing is left running."""
    pid_file = tmp_path / "driver.pid"
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 600\n")
    fake.chmod(0o755)
    code = (
        "from pathlib import Path\n"
        "from servelab.recipes.workload import WlBfcl\n"
        "from servelab.run.bfcl import run_bfcl\n"
        "from servelab.run.stage import Target\n"
        f"run_bfcl(Target('http://127.0.0.1:9', 'm'), WlBfcl(test_categories=['multiple']), "
        f"Path({str(tmp_path / 'out')!r}), python=Path({str(fake)!r}))\n"
    )
    stage = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # hang guard only: the driver starts within a second or two
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert stage.poll() is None and time.monotonic() < deadline, "the BFCL driver never started"
            time.sleep(0.05)
        driver = int(pid_file.read_text())
        stage.send_signal(signal.SIGINT)
        assert stage.wait(timeout=60) != 0
        assert "KeyboardInterrupt" in stage.stderr.read()
        assert not running(driver)
    finally:
        stage.kill()
