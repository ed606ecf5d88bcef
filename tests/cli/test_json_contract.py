"""One output contract (docs/output.md): every command that answers with data has --json; each answer is one
object whose first keys are `schema` and `schema_version`, a schema declared in servelab.cli._common.SCHEMAS
and listed in docs/output.md with that version and the keys the answer holds."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from servelab.cli._common import SCHEMAS
from servelab.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "output.md"
# commands whose whole job is to write something, not to answer: none today (each reports what it did)
NO_DATA: dict[str, str] = {}


class Documented:
    def __init__(self, version: int, keys: str) -> None:
        self.version = version
        names = re.findall(r"`([\w.]+\??)`", keys)
        self.required = {n for n in names if not n.endswith("?")}
        self.optional = {n[:-1] for n in names if n.endswith("?")}
        self.open = "..." in keys  # more keys, named by the question


def documented() -> dict[str, Documented]:
    """The table's rows: | `schema` | version | command | keys | notes |."""
    out = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("| `servelab."):
            name, version, _, keys, _ = (cell.strip() for cell in line.strip("|").split("|"))
            out[name.strip("`")] = Documented(int(version), keys)
    return out


def commands(cmd=None, path=()):
    """(path, click command) of every command that runs: leaves, and groups that answer themselves."""
    cmd = cmd or typer.main.get_command(app)
    subs = getattr(cmd, "commands", {})
    if path and (not subs or getattr(cmd, "invoke_without_command", False)):
        yield " ".join(path), cmd
    for name, sub in subs.items():
        yield from commands(sub, (*path, name))


def test_every_schema_is_listed_with_its_version():
    listed = documented()
    assert {name: d.version for name, d in listed.items()} == {n: s.version for n, s in SCHEMAS.items()}


def test_every_command_that_answers_with_data_has_json():
    missing = [path for path, cmd in commands() if path not in NO_DATA and "--json" not in _options(cmd)]
    assert missing == []


def _options(cmd) -> set[str]:
    return {opt for p in cmd.params for opt in getattr(p, "opts", [])}


RESULT = {
    "date": "20261130-101500", "backend": "openai", "label": "openai", "model_id": "Qwen/Qwen3-0.6B",
    "num_prompts": 8, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 4, "duration": 2.0,
    "completed": 8, "failed": 0, "output_throughput": 400.0, "mean_ttft_ms": 50.0, "median_ttft_ms": 48.0,
    "p99_ttft_ms": 90.0, "mean_tpot_ms": 10.0, "median_tpot_ms": 10.0, "p99_tpot_ms": 20.0,
}  # fmt: skip
KEY = "dsr1-fp8-h200-sglang"
CASES = [
    (["models"], "servelab.models"),
    (["models", "show", "qwen3-32b"], "servelab.model"),
    (["systems"], "servelab.systems"),
    (["systems", "show", "h200_sxm"], "servelab.system"),
    (["memory", "qwen3-32b"], "servelab.memory"),
    (["estimate", "qwen3-32b", "--batch", "8"], "servelab.estimate"),
    (["estimate", "qwen3-32b", "--batch", "8", "--mode", "agg", "--breakdown"], "servelab.estimate"),
    (["estimate", "qwen3-32b", "--batch", "8", "--mode", "agg", "--explain"], "servelab.estimate"),
    (["plan", "qwen3-32b", "--gpus", "2", "--top", "2"], "servelab.plan"),
    (["db", "query", "gemm", "--m", "128", "--n", "4096", "--k", "4096"], "servelab.db.query"),
    (["db", "status"], "servelab.db.status"),
    (["collect", "--dry-run", "--model", "qwen3-32b", "--smoke"], "servelab.collect.plan"),
    (["recipes", "list"], "servelab.recipes"),
    (["recipes", "show", KEY], "servelab.recipe"),
    (["recipes", "render", KEY], "servelab.launch"),
    (["recipes", "lock", "--check"], "servelab.recipes.lock"),
    (["sweep", KEY, "--lowest-conc"], "servelab.jobs"),
    (["run", KEY, "--arm", "tp8-ep1", "--seq-len", "1k1k", "--conc", "4", "--dry-run"], "servelab.run.plan"),
    (["results", "import", "r.json", "--store", "s.db"], "servelab.results.import"),
    (["results", "list", "--store", "s.db"], "servelab.results.runs"),
    (["results", "show", "{run}", "--store", "s.db"], "servelab.results.run"),
    (["results", "compare", "{run}", "{run}", "--store", "s.db"], "servelab.results.compare"),
    (["results", "export", "--store", "s.db", "-o", "x.csv"], "servelab.results.export"),
    (["results", "push", "--to", "t.db", "--store", "s.db"], "servelab.results.push"),
    (["report", "r.json", "-o", "r.html"], "servelab.report"),
]


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> list[tuple[list[str], str, dict]]:
    where = tmp_path_factory.mktemp("json")
    (where / "r.json").write_text(json.dumps(RESULT))
    runner = CliRunner()
    out, run_id = [], ""
    with contextlib.chdir(where):
        for args, schema in CASES:
            args = [a.replace("{run}", run_id) for a in args]
            r = runner.invoke(app, [*args, "--json"], catch_exceptions=False)
            assert r.exit_code == 0, (args, r.output)
            data = json.loads(r.stdout)
            if schema == "servelab.results.import":
                run_id = data["imported"][0]["run_id"]
            out.append((args, schema, data))
    return out


@pytest.mark.slow  # 1.8 s of CPU a case: a whole plan, or every command's help
def test_each_answer_names_its_schema_first_and_holds_the_documented_keys(answers):
    listed = documented()
    for args, schema, data in answers:
        assert list(data)[:2] == ["schema", "schema_version"], args
        assert (data["schema"], data["schema_version"]) == (schema, SCHEMAS[schema].version), args
        doc = listed[schema]
        keys = set(data) - {"schema", "schema_version"}
        assert doc.required <= keys, (args, doc.required - keys)
        if not doc.open:
            assert keys <= doc.required | doc.optional, (args, keys - doc.required - doc.optional)


def test_every_schema_run_here_or_by_the_tests_named():
    """The answers not run above are run where their command is tested, with their schema checked there."""
    elsewhere = {
        "servelab.bench": "tests/bench/test_mock_runs.py",
        "servelab.run": "tests/run/test_cli_run.py",
        "servelab.jobs": "tests/recipes/test_sweep_predict.py",
        "servelab.db.compare_repeat": "tests/collect/test_collect.py",
        "servelab.changelog.validate": "tests/recipes/test_changelog_checkout.py",
    }
    ran = {schema for _, schema in CASES}
    for schema, test in elsewhere.items():
        assert schema in (ROOT / test).read_text(), (schema, test)
    assert ran | set(elsewhere) <= set(SCHEMAS)
