"""`servelab run` with all three stages together, through the CLI, against the answer server (tests/run/
answer_server.py): it streams the benchmark's completions, answers GSM8K from a small file the test writes and
calls BFCL's ground-truth functions, or answers both wrongly. One workload file names the bench config, the
lm_eval gsm8k task, the BFCL categories (two cases each) and assertions on every stage."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from answer_server import MODEL, AnswerServer, bfcl_data_dir, load_bfcl_cases

from servelab.results.store import Store
from servelab.run import bfcl

SRC = Path(__file__).resolve().parents[2] / "src"
pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install '.[evals]')")

QUESTIONS = [
    ("Tom has 3 apples and buys 4 more. How many apples does he have?", "3 + 4 = 7\n#### 7"),
    ("A box holds 12 pens. How many pens are in 3 boxes?", "12 * 3 = 36\n#### 36"),
    ("Ann had 50 stickers and gave away 18. How many are left?", "50 - 18 = 32\n#### 32"),
    ("A ticket costs $8. How much do 5 tickets cost?", "8 * 5 = 40\n#### 40"),
]
SINGLE = ["simple_python", "multiple", "parallel", "parallel_multiple"]
MULTI = ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"]
CASE_IDS = {f"{c}_{i}" for c in SINGLE for i in range(2)} | {f"{leaf}_0" for leaf in MULTI}
ASSERTIONS = [
    "gsm8k.exact_match >= 0.99",
    "bfcl.overall.accuracy >= 0.99",
    "bfcl.multi_turn.accuracy >= 0.99",
]
KEY = "sk-run-secret-4821"
BENCH_ASSERTIONS = ["bench.completed == 4", "bench[s-conc-2].failed == 0"]


def workload(path: Path) -> Path:
    """perf-eval's form: one bench config, lm_eval's gsm8k with perf-eval's model_args, five BFCL
    categories (two cases of each single-turn one, one per multi_turn leaf)."""
    data = {
        "name": "answers",
        "gpu": "H200",
        "vllm": {"model": MODEL},
        "vllm_bench": {
            "configs": [
                {"name": "s", "input_len": 16, "output_len": 4, "num_prompts": 4, "max_concurrency": 2}
            ]
        },
        "lm_eval": {
            "model_args": {"tokenized_requests": False, "tokenizer_backend": None, "timeout": 60},
            "tasks": [
                {"name": "gsm8k", "num_fewshot": 2, "model_args": {"num_concurrent": 2, "max_gen_toks": 64}}
            ],
        },
        "bfcl": {
            "test_categories": [*SINGLE, "multi_turn"],
            "max_test_cases": {**dict.fromkeys(SINGLE, 2), "multi_turn": 4},
            "num_threads": 4,
        },
        "assertions": ASSERTIONS,
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def gsm8k_file(tmp_path: Path) -> Path:
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in QUESTIONS))
    return path


@pytest.fixture(scope="module")
def cases(bfcl_env_python):
    return load_bfcl_cases(bfcl_data_dir(bfcl_env_python), CASE_IDS)


def servelab(*args: str | Path, **env_vars: str) -> subprocess.CompletedProcess:
    pythonpath = f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    env = os.environ | {"PYTHONPATH": pythonpath, "COLUMNS": "200"} | env_vars
    cmd = [sys.executable, "-m", "servelab.cli.main", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)  # hang guard


def run_args(tmp_path: Path, server: AnswerServer, gsm8k_file: Path, bfcl_python: Path) -> list:
    wl = workload(tmp_path / "wl.yaml")
    args = ["run", wl, "--base-url", server.url, "--gsm8k-path", gsm8k_file, "--store", tmp_path / "r.db"]
    for a in BENCH_ASSERTIONS:
        args += ["--assert", a]
    return args + ["--bfcl-python", bfcl_python]


@pytest.mark.slow
def test_right_answers_pass_every_assertion_and_land_in_the_store(
    tmp_path, gsm8k_file, cases, bfcl_env_python
):
    assert {c.id for c in cases} == CASE_IDS
    seen = []
    with AnswerServer(correct=True, gsm8k=gsm8k_file, bfcl_cases=cases) as server:
        server.on_request = seen.append
        p = servelab(*run_args(tmp_path, server, gsm8k_file, bfcl_env_python), "--json", OPENAI_API_KEY=KEY)
    assert p.returncode == 0, p.stderr[-3000:]
    # every stage sent the caller's key (the model lookup, bench, lm-eval and bfcl-eval), and kept it nowhere
    assert len(seen) > 4 + 4 + len(CASE_IDS)
    assert {v for h in seen for k, v in h.items() if k.lower() == "authorization"} == {f"Bearer {KEY}"}
    assert all(any(k.lower() == "authorization" for k in h) for h in seen)
    assert KEY not in p.stdout + p.stderr
    for path in tmp_path.rglob("*"):
        assert not path.is_file() or KEY.encode() not in path.read_bytes(), path
    result = json.loads(p.stdout)
    assert result["outcome"] == "pass"
    rows = [(r["stage"], r["config"], r["status"]) for r in result["stages"]]
    assert rows == [("bench", "s-conc-2", "pass"), ("gsm8k", "gsm8k", "pass"), ("bfcl", "", "pass")]
    judged = {a["assertion"]: a["outcome"] for a in result["assertions"]}
    assert judged == dict.fromkeys(ASSERTIONS + BENCH_ASSERTIONS, "pass")

    shown = servelab("results", "show", result["run_id"], "--store", tmp_path / "r.db", "--json")
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert record["outcome"] == "pass"
    metrics = {(m["stage"], m["config"], m["name"]): m for m in record["metrics"]}
    assert metrics["bench", "s-conc-2", "completed"]["value"] == 4
    assert metrics["bench", "s-conc-2", "total_output_tokens"]["value"] == 4 * 4
    assert metrics["gsm8k", "gsm8k", "exact_match"]["value"] == 1.0
    assert metrics["gsm8k", "gsm8k", "num_questions"]["value"] == len(QUESTIONS)
    for category in [*SINGLE, "multi_turn", *MULTI, "overall"]:
        assert metrics["bfcl", "", f"{category}.accuracy"]["value"] == 1.0, category
    assert metrics["bfcl", "", "multi_turn.num_cases"]["value"] == 4
    assert {m["source"] for m in record["metrics"]} == {"measured"}
    run_dir = tmp_path / "runs" / result["run_id"]
    assert (run_dir / "gsm8k-gsm8k" / "lm_eval_results.json").is_file()
    assert (run_dir / "bfcl" / bfcl.SCORES_FILE).is_file()


@pytest.mark.slow
def test_wrong_answers_fail_the_accuracy_assertions_by_name(tmp_path, gsm8k_file, cases, bfcl_env_python):
    with AnswerServer(correct=False, gsm8k=gsm8k_file, bfcl_cases=cases) as server:
        p = servelab(*run_args(tmp_path, server, gsm8k_file, bfcl_env_python))
    assert p.returncode == 1, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    for text in ASSERTIONS:  # each failing assertion is named in the summary, with what was observed
        [line] = [ln for ln in lines if text in ln]
        assert "fail" in line.split(text, 1)[1] and "0" in line.split(text, 1)[1], line
    for text in BENCH_ASSERTIONS:  # the benchmark itself went fine
        [line] = [ln for ln in lines if text in ln]
        assert " pass " in line, line
    # the summary shows each stage's headline metrics
    [gsm8k_row] = [ln for ln in lines if "gsm8k gsm8k" in ln]
    assert f"exact_match 0, exact_match_flexible 0, num_questions {len(QUESTIONS)}" in gsm8k_row
    [bfcl_row] = [ln for ln in lines if ln.startswith("│ bfcl ")]
    assert "overall.accuracy 0, overall.inference_errors 0" in bfcl_row
    assert lines[-1].startswith("fail: run ")


def _edit(path: Path, **changes) -> Path:
    data = yaml.safe_load(path.read_text()) | changes
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


NO_SERVER = "http://127.0.0.1:9"  # had the checks let the run start, it would end as error (exit 3)
GSM8K_ONLY = {"name": "gsm8k", "num_fewshot": 2}


@pytest.mark.parametrize(
    ("workload_changes", "options", "env", "message"),
    [
        (
            {"lm_eval": {"tasks": [GSM8K_ONLY, {"name": "gsm8k_typo"}]}},
            ["--stages", "gsm8k"],
            {},
            r"wl\.yaml: lm_eval\.tasks\[1\]: 'gsm8k_typo' is not an lm-eval task with a task file",
        ),
        (
            {},
            ["--stages", "gsm8k", "--gsm8k-path", "none.jsonl"],
            {},
            r"--gsm8k-path: none\.jsonl: no such file",
        ),
        (
            {},
            ["--stages", "bfcl", "--bfcl-python", "none/python"],
            {},
            r"--bfcl-python: none/python is not an",
        ),
        (
            {},
            ["--stages", "bench,bfcl"],
            {bfcl.PYTHON_ENV: "none/python", "PATH": os.path.dirname(sys.executable)},
            r"the bfcl stage needs a BFCL environment: create it with scripts/setup_bfcl\.sh",
        ),
    ],
    ids=["unknown-task", "no-gsm8k-file", "bad-bfcl-python", "no-bfcl-env"],
)
@pytest.mark.slow
def test_what_the_eval_stages_need_is_bad_input_before_the_server_starts(
    tmp_path, monkeypatch, workload_changes, options, env, message
):
    monkeypatch.chdir(tmp_path)  # no ./.venv-bfcl here
    wl = _edit(workload(tmp_path / "wl.yaml"), **workload_changes)
    env = {bfcl.VENV_ENV: ""} | env
    p = servelab("run", wl, "--base-url", NO_SERVER, "--store", tmp_path / "r.db", *options, **env)
    assert p.returncode == 2, p.stderr
    [line] = p.stderr.splitlines()
    assert line.startswith("error: ") and re.search(message, line), line
    with Store.open(tmp_path / "r.db") as store:
        assert store.list_runs() == []  # nothing was recorded: the run never began
