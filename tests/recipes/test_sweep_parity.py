"""`servelab sweep` against InferenceX's own generator: for each pinned case (tests/data/inferencex/sweep, the
output of `generate_sweep_configs.py full-sweep` at the pinned upstream commit, see UPSTREAM.md and
scripts/refresh_upstream_data.py) the same rows, field for field, in the same order."""

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli.main import app
from servelab.recipes import recipe_store, sweep
from servelab.recipes.filters import Filters
from servelab.recipes.matrix import matrix
from servelab.recipes.sweep import SERVELAB_FIELDS

IX = Path(__file__).parents[1] / "data" / "inferencex"
CASES = sorted(p.name.removesuffix(".json.gz") for p in (IX / "sweep").glob("*.json.gz"))
# Cases whose sweep prints most of the pinned store (1,167-4,116 rows, 2-12 s each): the slow tier. The quick
# tier keeps the narrower cases (69-1,819 rows, each filter kind: runner, model, precision, scenario, nodes,
# framework, sequence lengths, step size) and tests/recipes/test_sweep_filters.py::test_filters, which checks
# each of these filters' rows against the store.
WIDE = {
    "all-evals", "evals-only", "full", "max-conc-64", "max-ep-4", "max-tp-4", "min-conc-16",
    "min-max-conc-8-128", "no-evals", "runner-node-filter-amd",
}  # fmt: skip


def upstream(case: str) -> dict:
    with gzip.open(IX / "sweep" / f"{case}.json.gz") as f:
        return json.load(f)


def servelab_args(args: list[str]) -> list[str]:
    """InferenceX's argv as `servelab sweep` takes it: options of several values become comma lists."""
    out: list[str] = []
    for arg in args:
        if not arg.startswith("--") and out and not out[-1].startswith("--"):
            out[-1] += f",{arg}"
        else:
            out.append(arg)
    return out


def test_case_names_cover_every_filter():
    assert len(CASES) == 19
    assert upstream("full")["args"] == [] and len(upstream("full")["rows"]) == 1820


@pytest.fixture(scope="module")
def ix_store():
    return recipe_store.open_store(IX / "configs")


@pytest.fixture(scope="module")
def built_jobs() -> dict:
    """The jobs the cases' sweeps built, by point: a job's row is its point's row, so a point two cases share
    (most of them) is built once; each case still compares every row its own sweep printed."""
    return {}


def sweep_rows(args: list[str], ix_store, built_jobs, monkeypatch) -> list[dict]:
    """The rows `servelab sweep ARGS --format json` prints for the pinned store, servelab's own fields left
    out."""
    # The CLI reads the same pinned store for every case; parsing the master files once saves seconds each.
    monkeypatch.setattr(recipe_store, "open_store", lambda directory=None, ref=None: ix_store)
    build_job = sweep.build_job

    def built(store, point):
        key = (point.key, point.scenario, json.dumps(point.row, sort_keys=True))
        if key not in built_jobs:
            built_jobs[key] = build_job(store, point)
        return built_jobs[key]

    monkeypatch.setattr(sweep, "build_job", built)
    argv = ["sweep", "--dir", str(IX / "configs"), "--format", "json", *args]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    return [{k: v for k, v in job.items() if k not in SERVELAB_FIELDS} for job in json.loads(result.stdout)]


def assert_same_rows(rows: list[dict], expected: list[dict]) -> None:
    assert len(rows) == len(expected)
    differing = [i for i, (a, b) in enumerate(zip(rows, expected, strict=True)) if a != b]
    if differing:
        first = differing[0]
        pytest.fail(f"{len(differing)} rows differ, first at {first}: {rows[first]} != {expected[first]}")


@pytest.mark.slow  # 1.7 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in WIDE else c for c in CASES])
def test_rows_equal_inferencex(case, ix_store, built_jobs, monkeypatch):
    record = upstream(case)
    assert record["exit_code"] == 0, record.get("stderr")
    assert_same_rows(
        sweep_rows(servelab_args(record["args"]), ix_store, built_jobs, monkeypatch), record["rows"]
    )


# One model of the pinned store, whose rows span both scenarios, single- and multinode arms and runners of
# both vendors; a row's model-prefix is its key's, so narrowing the sweep to it keeps exactly those rows.
SAMPLE_MODEL = "kimik3"


@pytest.mark.parametrize("case", sorted(WIDE))
def test_one_models_rows_equal_inferencex(case, ix_store, built_jobs, monkeypatch):
    """The wide cases in the quick tier: the case's filters on one model's recipes print upstream's rows of
    that model, in the same order (test_rows_equal_inferencex compares every row, in the slow tier)."""
    record = upstream(case)
    expected = [row for row in record["rows"] if row["model-prefix"] == SAMPLE_MODEL]
    assert expected, f"{case}: no {SAMPLE_MODEL} row upstream"
    args = [*servelab_args(record["args"]), "--model-prefix", SAMPLE_MODEL]
    assert_same_rows(sweep_rows(args, ix_store, built_jobs, monkeypatch), expected)


@pytest.mark.slow  # 1.0 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_found_in_an_inferencex_checkout(tmp_path, monkeypatch):
    """Inside an InferenceX checkout `servelab sweep` finds configs/*-master.yaml and configs/runners.yaml."""
    (tmp_path / "configs").mkdir()
    master = (IX / "configs" / "amd-master.yaml").read_text()
    for name in ("amd-master.yaml", "runners.yaml"):
        (tmp_path / "configs" / name).write_text((IX / "configs" / name).read_text())
    (tmp_path / "configs" / "ci-priority.yaml").write_text("not: a master file\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SERVELAB_RECIPES_DIR", raising=False)
    result = CliRunner().invoke(app, ["sweep", "--format", "json", "--single-node", "--seq-lens", "8k1k"])
    assert result.exit_code == 0, result.output
    keys = {job["config-key"] for job in json.loads(result.stdout)}
    assert keys and keys <= {line.split(":")[0] for line in master.splitlines() if line[:1].isalnum()}


def test_test_config_as_the_changelog_runs_it(ix_store):
    """InferenceX's process_changelog.py runs `test-config --no-evals` and `test-config --evals-only` for the
    keys of new changelog entries; at the pinned commit (whose configs are the pinned ones) its output holds
    the same rows as servelab's test-config mode (plus its recipe-fingerprint)."""
    with gzip.open(IX / "changelog" / "jobs-843c6254ff69.json.gz") as f:
        jobs = json.load(f)
    (entry,) = jobs["changelog_metadata"]["entries"]
    keys, scenarios = entry["config-keys"], entry["scenario-type"]
    bench = matrix(ix_store, keys, Filters(mode="test-config", scenario_type=scenarios, no_evals=True))
    expected = [r for family in ("single_node", "multi_node") for rows in jobs[family].values() for r in rows]
    assert [p.row for p in bench] == [
        {k: v for k, v in r.items() if k != "recipe-fingerprint"} for r in expected
    ]
    evals = matrix(ix_store, keys, Filters(mode="test-config", scenario_type=scenarios, evals_only=True))
    assert [p.row for p in evals] == jobs["agentic_evals"] and len(evals) == 1
