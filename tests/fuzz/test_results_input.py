"""Hostile result files, stores and arguments for `results`, `report` and the other readers: fields of the
wrong type or out of range (1e20, 1e400, NaN, dicts), JSON nested past the parser's recursion, store rows a
hand or another tool wrote badly, FIFOs where files are read (which never end), and command-line arguments
that are not UTF-8. Each ends in an answer or one line naming the file or value, never an internal error or a
hang."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from fuzzkit import COUNTS, TRACEBACK, hostile, run_cli, tiny_workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from quick_diagonal import pairs

SRC = Path(__file__).resolve().parents[2] / "src"
GOOD = {
    "date": "20261130-101500", "backend": "openai", "label": "vllm", "model_id": "Qwen/Qwen3-0.6B",
    "num_prompts": 4, "request_rate": "inf", "max_concurrency": 2, "duration": 2.0, "completed": 4,
    "failed": 0, "median_ttft_ms": 110.0, "median_tpot_ms": 24.5, "output_throughput": 400.0,
}  # fmt: skip
INFERENCEX = {
    "hw": "h200", "conc": 64, "image": "vllm/vllm-openai@sha256:abc", "model": "deepseek-ai/DeepSeek-R1-0528",
    "infmax_model_prefix": "dsr1", "framework": "vllm", "precision": "fp8", "spec_decoding": "none",
    "isl": 1024, "osl": 1024, "is_multinode": False, "tp": 8, "ep": 1, "median_ttft": 0.5,
    "median_tpot": 0.02, "tput_per_gpu": 1000.0,
}  # fmt: skip
# raw JSON text of a value (1e400 is how a file says infinity; Python's json writes no such number)
VALUES = {
    "huge": "1e20", "overflow": "1e400", "neg-overflow": "-1e400", "nan": "NaN", "negative": "-5",
    "fraction": "1.5", "dict": '{"a": 1}', "list": "[1, 2]", "true": "true", "null": "null", "empty": '""',
    "text": '"abc"', "slash": '"a/b/../../x"', "markup": '"x[/]y"', "long": json.dumps("x" * 5000),
}  # fmt: skip
VLLM_FIELDS = ["max_concurrency", "request_rate", "label", "model_id", "duration", "date", "completed",
               "median_ttft_ms", "servelab_version", "source", "backend"]  # fmt: skip
IX_FIELDS = ["conc", "tp", "ep", "isl", "hw", "framework", "dp_attention", "is_multinode", "num_prefill_gpu",
             "image", "recipe_fingerprint"]  # fmt: skip


def _with(base: dict, field: str, raw: str) -> str:
    text = json.dumps({k: v for k, v in base.items() if k != field})
    return text[:-1] + f', "{field}": {raw}}}'


def _readers(f: Path, tmp_path: Path, codes=(0, 2)) -> None:
    """Import the file, then every reader of the store, and the report of the file itself."""
    db = str(tmp_path / "s.db")
    r = hostile("results", "import", str(f), "--store", db, "--json", codes=codes, keep=[f])
    if r.code == 0:
        [entry] = json.loads(r.out)["imported"]
        for args in (("list",), ("show", entry["run_id"]), ("export", "--format", "json")):
            hostile("results", *args, "--store", db, codes=(0,))
    hostile("report", str(f), "-o", str(tmp_path / "f.html"), codes=(0, 2), keep=[f])


@pytest.mark.parametrize(
    ("field", "value"), pairs(VLLM_FIELDS, VALUES)
)  # a diagonal quick (quick_diagonal.py)
def test_vllm_result_fields(field, value, tmp_path):
    f = tmp_path / "r.json"
    f.write_text(_with(GOOD, field, VALUES[value]))
    _readers(f, tmp_path)


@pytest.mark.parametrize(("field", "value"), pairs(IX_FIELDS, VALUES))
def test_inferencex_result_fields(field, value, tmp_path):
    f = tmp_path / "r.json"
    f.write_text(_with(INFERENCEX, field, VALUES[value]))
    _readers(f, tmp_path)


DEEP = {
    "lists": "[" * 100_000 + "]" * 100_000,
    "objects": '{"a": ' * 50_000 + "1" + "}" * 50_000,
    "in-a-field": json.dumps(GOOD)[:-1] + ', "extra": ' + "[" * 100_000 + "]" * 100_000 + "}",
}


@pytest.mark.parametrize("shape", list(DEEP))
def test_deeply_nested_json(shape, tmp_path):
    """Python's parser gives up with a RecursionError past its recursion limit: the file is named instead."""
    f = tmp_path / "r.json"
    f.write_text(DEEP[shape])
    r = hostile("results", "import", str(f), "--store", str(tmp_path / "s.db"), names=[str(f)], keep=[f])
    assert "nested" in r.err, r.err
    hostile("report", str(f), "-o", str(tmp_path / "p.html"), names=[str(f)], keep=[f])
    hostile("report", "--predicted", str(f), "-o", str(tmp_path / "p.html"), names=[str(f)], keep=[f])
    hostile("run", "--job", str(f), "--dry-run", names=[str(f)], keep=[f])


FUZZ = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


# 30 generated files through every reader: quick, test_vllm_result_fields and test_inferencex_result_fields
@pytest.mark.slow
@FUZZ
@given(edits=st.dictionaries(st.sampled_from(sorted(GOOD)), json_values, min_size=1, max_size=4))
def test_result_files_generated(edits, tmp_path_factory):
    d = tmp_path_factory.mktemp("res")
    f = d / "r.json"
    f.write_text(json.dumps({**GOOD, **edits}))
    _readers(f, d)


# store rows as another tool (or a hand with sqlite3) could write them: the schema's types are affinities
BAD_ROWS = {
    "argv-not-json": "UPDATE runs SET server_argv = 'not json'",
    "argv-object": "UPDATE runs SET server_argv = '{\"a\": 1}'",
    "env-list": "UPDATE runs SET env = '[1, 2]'",
    "env-deep": "UPDATE runs SET env = '" + "[" * 100_000 + "]" * 100_000 + "'",
    "value-text": "UPDATE metrics SET value = 'abc'",
    "value-blob": "UPDATE metrics SET value = x'00ff'",
    "value-huge": "UPDATE metrics SET value = 1e308 * 10",
    "repetition-text": "UPDATE stages SET repetition = 'x'; UPDATE metrics SET repetition = 'x'",
    "name-number": "UPDATE runs SET name = 42",
    "name-blob": "UPDATE runs SET name = x'ff00'",
    "name-markup": "UPDATE runs SET name = 'x[/]y'",
    "config-markup": "UPDATE stages SET config = '[/]'; UPDATE metrics SET config = '[/]'",
    "created-number": "UPDATE runs SET created_at = 5",
    "started-text": "UPDATE runs SET started_at = 'yesterday'",
    "artifact-outside": "UPDATE stages SET artifact = '../../../../etc/passwd'",
    "artifact-dir": "UPDATE stages SET artifact = '.'",
    "unit-number": "UPDATE metrics SET unit = 7",
}


@pytest.mark.parametrize("row", list(BAD_ROWS))
def test_bad_store_rows(row, tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json.dumps(GOOD))
    db = tmp_path / "s.db"
    r = hostile("results", "import", str(f), "--store", str(db), "--json", codes=(0,))
    run_id = json.loads(r.out)["imported"][0]["run_id"]
    with sqlite3.connect(db) as conn:
        conn.executescript(BAD_ROWS[row] + ";")
    for args in (
        ("results", "list"), ("results", "list", "--json"), ("results", "show", run_id),
        ("results", "show", run_id, "--json"), ("results", "compare", run_id, run_id), ("results", "export"),
        ("results", "export", "--format", "json"),
        ("report", "--run", run_id, "-o", str(tmp_path / "p.html")),
        ("calibrate", "engines", "--from-store", str(db), "--dry-run"),
    ):  # fmt: skip
        hostile(*args, *([] if args[0] == "calibrate" else ["--store", str(db)]), codes=(0, 1, 2))


def _servelab(args: list[bytes | str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real CLI in a process of its own: for inputs that can hang (a FIFO) or that only the OS passes
    (bytes that are not UTF-8). A hang fails the test at `timeout`, a guard far above the run's seconds."""
    COUNTS["tried"] += 1
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "servelab.cli.main", *args], cwd=cwd, env=env, capture_output=True,
        timeout=timeout,
    )  # fmt: skip


def _one_line(r: subprocess.CompletedProcess, codes=(2,)) -> str:
    err = r.stderr.decode("utf-8", "backslashreplace")
    assert TRACEBACK not in err and "internal error" not in err, err
    assert r.returncode in codes, (r.returncode, err)
    if r.returncode == 2:
        assert len([x for x in err.splitlines() if x.startswith("error:")]) == 1, err
    return err


FIFO_COMMANDS = {
    "results-import": ["results", "import", "{fifo}", "--store", "s.db"],
    "report": ["report", "{fifo}", "-o", "p.html"],
    "report-predicted": ["report", "--predicted", "{fifo}", "-o", "p.html"],
    "run-job": ["run", "--job", "{fifo}", "--dry-run"],
    "calibrate-csv": ["calibrate", "engines", "--csv", "{fifo}", "--dry-run"],
    "calibrate-inferencex": ["calibrate", "engines", "--from-inferencex", "{fifo}", "--dry-run"],
    "calibrate-store": ["calibrate", "engines", "--from-store", "{fifo}", "--dry-run"],
    "results-store": ["results", "list", "--store", "{fifo}"],
    "memory": ["memory", "{fifo}"],
    "db-batch": ["db", "query", "--batch", "{fifo}"],
    "recipes-validate": ["recipes", "validate", "{fifo}"],
    "bench-dataset": ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--no-ready-check",
                      "--dataset-name", "custom", "--dataset-path", "{fifo}"],
    "plan-calibration": ["plan", "llama-3.1-8b", "--calibration", "{fifo}"],
}  # fmt: skip


# a process each (0.7-1 s of CPU): the quick tier keeps the first two, CI runs all
@pytest.mark.parametrize(
    "name", [n if i < 2 else pytest.param(n, marks=pytest.mark.slow) for i, n in enumerate(FIFO_COMMANDS)]
)
def test_a_fifo_where_a_file_is_read_is_refused(name, tmp_path):
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    r = _servelab([a.format(fifo=fifo) for a in FIFO_COMMANDS[name]], tmp_path)
    assert str(fifo) in _one_line(r)


NOT_UTF8 = {
    "results-show": [b"results", b"show", b"\xff", b"--store", b"s.db"],
    "results-list-name": [b"results", b"list", b"--name", b"\xff\xfe", b"--store", b"s.db"],
    "results-import-name": [b"results", b"import", b"r2.json", b"--name", b"\xff", b"--store", b"s.db"],
    "results-compare": [b"results", b"compare", b"\xff", b"\xfe", b"--store", b"s.db"],
    "report-run": [b"report", b"--run", b"\xff", b"--store", b"s.db", b"-o", b"p.html"],
    "bench-base-url": [b"bench", b"--base-url", b"http://\xff", b"--model", b"m", b"--no-ready-check"],
    "bench-header": [b"bench", b"--base-url", b"http://127.0.0.1:9", b"--model", b"m", b"--header",
                     b"X-A=\xff", b"--no-ready-check"],
    "bench-model": [b"bench", b"--base-url", b"http://127.0.0.1:9", b"--model", b"\xff", b"--no-ready-check",
                    b"--num-prompts", b"1"],
    "models-show": [b"models", b"show", b"\xff"],
    "run-source": [b"run", b"\xff", b"--dry-run"],
    "run-stages": [b"run", b"{wl}", b"--stages", b"\xff", b"--dry-run"],
    "plan-system": [b"plan", b"llama-3.1-8b", b"--system", b"\xff"],
    "sweep-key": [b"sweep", b"\xff"],
    "recipes-show": [b"recipes", b"show", b"\xff"],
}  # fmt: skip


# a process each (0.6-1 s of CPU): the quick tier keeps the first two, CI runs all
@pytest.mark.parametrize(
    "name", [n if i < 2 else pytest.param(n, marks=pytest.mark.slow) for i, n in enumerate(NOT_UTF8)]
)
def test_arguments_that_are_not_utf8(name, tmp_path):
    """Linux passes any bytes: Python hands them on as surrogates, which SQLite, HTTP and stdout refuse."""
    (tmp_path / "r.json").write_text(json.dumps(GOOD))
    (tmp_path / "r2.json").write_text(json.dumps(GOOD | {"duration": 3.0}))  # not imported before
    wl = tiny_workload(tmp_path / "wl.yaml")
    # the store the results commands read, written in-process: only the hostile call needs the OS's argv
    assert run_cli("results", "import", "r.json", "--store", "s.db", cwd=tmp_path).code == 0
    args = [a.replace(b"{wl}", str(wl).encode()) for a in NOT_UTF8[name]]
    _one_line(_servelab(args, tmp_path), codes=(1, 2))
