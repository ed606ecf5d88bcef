"""Paths that alias and URLs as paths: every command that writes a file refuses an output that is one of its
inputs (the same path, `./` or `..` spellings, a symlink, a hard link, a store's SQLite side files), or is
another of its outputs, before it reads or writes anything; a store given as a URL becomes nothing on disk.
Each ends in one line naming the option (exit 2) and leaves every input byte for byte as it was."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
from fuzzkit import hostile, tiny_workload
from quick_diagonal import pairs

from servelab.recipes.recipe_store import DATA_DIR as RECIPES  # the shipped recipe store

RESULT = {
    "date": "20261130-101500", "backend": "openai", "label": "vllm", "model_id": "Qwen/Qwen3-0.6B",
    "num_prompts": 4, "request_rate": "inf", "max_concurrency": 2, "duration": 2.0, "completed": 4,
    "failed": 0, "median_ttft_ms": 110.0, "median_tpot_ms": 24.5, "output_throughput": 400.0,
}  # fmt: skip
CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
    "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
}  # fmt: skip
SILICON = {
    "id": "row0", "silicon_data_source": "test; silicon_concurrency=4", "backend": "vllm", "precision": "fp8",
    "backend_version": "0.10.0", "model_path": "Qwen/Qwen3-32B", "system": "h200_sxm", "mode": "agg",
    "isl": "1024", "osl": "1024", "gemm_quant_mode": "fp8_block", "moe_quant_mode": "fp8_block",
    "batch_size": "4", "tp_size": "8", "pp_size": "1", "attention_dp_size": "1", "moe_tp_size": "8",
    "moe_ep_size": "1", "silicon_ttft_ms": "100", "silicon_tpot_ms": "20",
}  # fmt: skip


@pytest.fixture
def inputs(tmp_path) -> dict[str, Path]:
    """One input of each kind in tmp_path: a result file, a model config, a silicon CSV, a results store
    holding one run, a recipe store."""
    (tmp_path / "r.json").write_text(json.dumps(RESULT))
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    with (tmp_path / "rows.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(SILICON))
        w.writeheader()
        w.writerow(SILICON)
    r = hostile("results", "import", "r.json", "--store", "s.db", "--name", "run1", codes=(0,), cwd=tmp_path)
    assert "imported" in r.out
    store = shutil.copytree(RECIPES, tmp_path / "recipes")
    recipe = sorted((store / "recipes").glob("*.yaml"))[0]
    key = next(line.split(":")[0] for line in recipe.read_text().splitlines() if line and line[0].isalnum())
    return {
        "result": tmp_path / "r.json",
        "config": tmp_path / "config.json",
        "csv": tmp_path / "rows.csv",
        "store": tmp_path / "s.db",
        "recipes": store,
        "recipe": recipe,
        "key": Path(key),
    }


# command (with {result}, {config}, {csv}, {store}, {recipes}, {recipe}, {key} and {out}), the input {out}
# aliases, and the option that must be named
COMMANDS = {
    "export-onto-store": (("results", "export", "-o", "{out}", "--store", "{store}"), "store", "--output"),
    "export-json-onto-store": (
        ("results", "export", "--format", "json", "-o", "{out}", "--store", "{store}"), "store", "--output",
    ),
    "report-onto-store": (
        ("report", "--store", "{store}", "--run", "run1", "-o", "{out}"), "store", "--output",
    ),
    "report-onto-result": (("report", "{result}", "-o", "{out}"), "result", "--output"),
    "report-onto-predicted": (("report", "--predicted", "{result}", "-o", "{out}"), "result", "--output"),
    "plan-report-onto-config": (("plan", "{config}", "--report", "{out}"), "config", "--report"),
    "calibrate-out-onto-csv": (
        ("calibrate", "engines", "--csv", "{csv}", "--out", "{out}"), "csv", "--out",
    ),
    "calibrate-summary-onto-csv": (
        ("calibrate", "engines", "--csv", "{csv}", "--summary", "{out}", "--dry-run"), "csv", "--summary",
    ),
    "calibrate-report-onto-csv": (
        ("calibrate", "engines", "--csv", "{csv}", "--report", "{out}", "--dry-run"), "csv", "--report",
    ),
    "calibrate-out-onto-store": (
        ("calibrate", "engines", "--from-store", "{store}", "--out", "{out}"), "store", "--out",
    ),
    "sweep-onto-recipe": (("sweep", "{key}", "--dir", "{recipes}", "--out", "{out}"), "recipe", "--out"),
    "changelog-jobs-onto-recipe": (
        ("changelog", "jobs", "--dir", "{recipes}", "--out", "{out}"), "recipe", "--out",
    ),
}  # fmt: skip


def _alias(way: str, target: Path, tmp_path: Path) -> str:
    """A path to `target` spelled another way."""
    if way == "same":
        return str(target)
    if way == "relative":
        return os.path.relpath(target, tmp_path)
    if way == "dotdot":
        (tmp_path / "sub").mkdir(exist_ok=True)
        return str(tmp_path / "sub" / ".." / target.relative_to(tmp_path))
    if way == "symlink":
        link = tmp_path / f"link-{target.name}"
        link.symlink_to(target)
        return str(link)
    if way == "hardlink":
        link = tmp_path / f"hard-{target.name}"
        os.link(target, link)
        return str(link)
    raise AssertionError(way)


WAYS = ["same", "relative", "dotdot", "symlink", "hardlink"]


@pytest.mark.parametrize(("name", "way"), pairs(COMMANDS, WAYS))  # a diagonal quick (quick_diagonal.py)
def test_an_output_that_is_an_input_is_refused(name, way, inputs, tmp_path):
    command, aliased, option = COMMANDS[name]
    values = {k: str(v) for k, v in inputs.items()} | {"out": _alias(way, inputs[aliased], tmp_path)}
    args = [a.format(**values) for a in command]
    if name.startswith("changelog"):  # the changelog names the recipe store's own file
        args += ["--base-ref", "HEAD", "--changelog", str(inputs["recipes"] / "perf-changelog.yaml")]
    hostile(
        *args, names=[option], cwd=tmp_path, keep=[inputs["store"], inputs["recipes"], *tmp_path.glob("*.*")]
    )


@pytest.mark.parametrize("side", ["-wal", "-shm"])
def test_an_output_onto_a_stores_side_file_is_refused(side, inputs, tmp_path):
    """SQLite keeps the write-ahead log beside the store: overwriting it loses committed runs."""
    out = f"{inputs['store']}{side}"
    hostile("results", "export", "-o", out, "--store", str(inputs["store"]), names=["--output"], cwd=tmp_path)


def test_two_outputs_onto_one_file_are_refused(inputs, tmp_path):
    hostile(
        "calibrate", "engines", "--csv", str(inputs["csv"]), "--summary", "x.json", "--report", "./x.json",
        "--dry-run", names=["x.json"], cwd=tmp_path, keep=[inputs["csv"]],
    )  # fmt: skip
    assert not (tmp_path / "x.json").exists()


def test_a_sweep_into_the_recipe_store_itself_is_refused(inputs, tmp_path):
    hostile(
        "sweep", str(inputs["key"]), "--dir", str(inputs["recipes"]), "--format", "sh", "--out",
        str(inputs["recipes"]), names=["--out"], cwd=tmp_path, keep=[inputs["recipes"]],
    )  # fmt: skip


URLS = [  # schemes servelab has no store for (postgresql:// and postgres:// it has: below)
    "sqlite:///tmp/results.db",
    "mysql+pymysql://u@h/db",
    "https://example.com/results.db",
    "s3://bucket/results.db",
    "file:///tmp/results.db",
]
STORE_COMMANDS = {
    "results-list": ("results", "list", "--store", "{url}"),
    "results-show": ("results", "show", "x", "--store", "{url}"),
    "results-export": ("results", "export", "--store", "{url}"),
    "results-import": ("results", "import", "{result}", "--store", "{url}"),
    "results-compare": ("results", "compare", "a", "b", "--store", "{url}"),
    "report": ("report", "--run", "x", "-o", "page.html", "--store", "{url}"),
    "calibrate": ("calibrate", "engines", "--from-store", "{url}", "--dry-run"),
    "run": ("run", "{wl}", "--base-url", "http://127.0.0.1:9", "--store", "{url}"),
}


@pytest.mark.parametrize("url", URLS, ids=lambda u: u.split(":")[0])
@pytest.mark.parametrize("name", list(STORE_COMMANDS))
def test_a_store_given_as_a_url_is_refused(name, url, tmp_path):
    (tmp_path / "r.json").write_text(json.dumps(RESULT))
    wl = tiny_workload(tmp_path / "wl.yaml")
    before = set(tmp_path.rglob("*"))
    values = {"url": url, "result": str(tmp_path / "r.json"), "wl": str(wl)}
    r = hostile(*[a.format(**values) for a in STORE_COMMANDS[name]], cwd=tmp_path, keep=[tmp_path])
    assert "URL" in r.err, r.err
    assert set(tmp_path.rglob("*")) == before, "a URL became files on disk"


# a PostgreSQL store whose server is not there (nothing listens on port 9): one line, nothing on disk
POSTGRES_URLS = ["postgresql://admin:pw@127.0.0.1:9/results", "postgres://127.0.0.1:9/results"]
HAVE_PSYCOPG = importlib.util.find_spec("psycopg") is not None
# without the [postgres] extra the store says what to install (exit 2); with it, that it cannot be reached
UNREACHABLE = (1, "cannot be reached now") if HAVE_PSYCOPG else (2, "pip install 'servelab[postgres]'")


@pytest.mark.parametrize("url", POSTGRES_URLS, ids=lambda u: u.split(":")[0])
@pytest.mark.parametrize("name", list(STORE_COMMANDS))
def test_a_postgres_store_not_there_is_one_line_and_never_files(name, url, tmp_path):
    (tmp_path / "r.json").write_text(json.dumps(RESULT))
    wl = tiny_workload(tmp_path / "wl.yaml")
    before = set(tmp_path.rglob("*"))
    values = {"url": url, "result": str(tmp_path / "r.json"), "wl": str(wl)}
    code, says = UNREACHABLE
    r = hostile(
        *[a.format(**values) for a in STORE_COMMANDS[name]], codes=(code,), cwd=tmp_path, keep=[tmp_path],
        env={"XDG_DATA_HOME": str(tmp_path / "xdg")},
    )  # fmt: skip
    assert says in r.err and "127.0.0.1:9" in r.err and "admin:pw" not in r.err, r.err
    assert set(tmp_path.rglob("*")) == before, "a URL became files on disk"
