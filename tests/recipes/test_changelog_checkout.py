"""`servelab changelog` inside an InferenceX checkout as it is (configs/*-master.yaml, configs/runners.yaml,
perf-changelog.yaml at the root; no flags, no fingerprints.lock), held against InferenceX's own job matrix for
the same change (tests/data/inferencex/changelog/probe.json.gz, from its process_changelog.py at the pinned
commit; see scripts/refresh_upstream_data.py)."""

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.cli.main import main
from servelab.recipes.changelog import matrix, open_change
from servelab.recipes.recipe_store import DATA_DIR  # the running servelab's own store

DATA = Path(__file__).parents[1] / "data" / "inferencex"
PROBE = json.loads(gzip.decompress((DATA / "changelog" / "probe.json.gz").read_bytes()))


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """The pinned InferenceX files laid out as its repository, with the probe entry appended in HEAD."""
    root = tmp_path_factory.mktemp("inferencex")
    shutil.copytree(DATA / "configs", root / "configs")
    shutil.copyfile(DATA / "perf-changelog.yaml", root / "perf-changelog.yaml")
    git(root, "init", "-q")
    for opt in ("user.email=t@example.com", "user.name=t", "commit.gpgsign=false"):
        git(root, "config", *opt.split("="))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    with (root / "perf-changelog.yaml").open("a") as f:
        f.write(PROBE["appended"])
    git(root, "commit", "-qam", "probe")
    return root


def cli(monkeypatch, capsys, *args):
    monkeypatch.setattr(sys, "argv", ["servelab", *args])
    with pytest.raises(SystemExit) as info:
        main()
    out, err = capsys.readouterr()
    return info.value.code, out, err


def rows(bucket) -> list[dict]:
    return [r for name in sorted(bucket) for r in bucket[name]] if isinstance(bucket, dict) else bucket


@pytest.mark.slow  # 3.1 s of CPU a case: a git checkout and whole sweeps of it
def test_jobs_equal_inferencex_matrix(checkout, monkeypatch):
    monkeypatch.chdir(checkout)
    change = open_change(None, "HEAD^", "HEAD")
    assert change.problems == [] and change.head.source.label == "HEAD:configs"
    got, want = matrix(change, change.jobs, "HEAD^", "HEAD"), PROBE["matrix"]
    assert got["changelog_metadata"]["entries"] == want["changelog_metadata"]["entries"]
    assert sorted(got["single_node"]) == sorted(want["single_node"])
    for name in set(want) - {"changelog_metadata"}:
        assert len(rows(got[name])) == len(rows(want[name])), name
        # every field InferenceX gives, recipe-fingerprint included; servelab adds config-key and fingerprint
        pairs = zip(rows(got[name]), rows(want[name]), strict=True)
        assert [{k: g.get(k) for k in w} for g, w in pairs] == rows(want[name])
    assert len(rows(want["single_node"])) == 30 and len(want["evals"]) == 9


@pytest.mark.slow
def test_cli_finds_everything_in_the_checkout(checkout, monkeypatch, capsys):
    monkeypatch.chdir(checkout)
    code, out, err = cli(monkeypatch, capsys, "changelog", "validate", "--base-ref", "HEAD^", "--json")
    assert code in (0, None) and json.loads(out)["new_entries"] == 1
    assert json.loads(out)["schema"] == "servelab.changelog.validate"
    assert "the fingerprint rule does not apply" in json.loads(out)["notes"][0]
    code, out, err = cli(monkeypatch, capsys, "changelog", "validate", "--base-ref", "HEAD^", "--strict")
    assert code in (0, None) and out.startswith("ok: 1 new entry (merge rules)"), err
    code, out, _ = cli(
        monkeypatch, capsys, "changelog", "jobs", "--base-ref", "HEAD^", "--format", "inferencex"
    )
    assert code in (0, None) and len(json.loads(out)["evals"]) == 9


def test_cli_refuses_pr_link_without_strict(checkout, monkeypatch, capsys):
    monkeypatch.chdir(checkout)
    code, _, err = cli(
        monkeypatch, capsys, "changelog", "validate", "--base-ref", "HEAD^", "--pr-link", "https://x"
    )
    assert code == 2 and "--pr-link: the merge rules check pr-links; add --strict" in err


AGENTIC_ENTRY = """
- config-keys:
    - {keys}
  description:
    - "agentic rows have no servelab launch"
  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/2
"""


def with_entry(checkout: Path, tmp_path: Path, keys: list[str]) -> Path:
    """A copy of the checkout with one more changelog entry committed."""
    root = tmp_path / "checkout"
    shutil.copytree(checkout, root)
    with (root / "perf-changelog.yaml").open("a") as f:
        f.write(AGENTIC_ENTRY.format(keys="\n    - ".join(keys)))
    git(root, "commit", "-qam", "entry")
    return root


@pytest.mark.slow
def test_cli_scripts_leave_out_rows_without_a_launch(checkout, tmp_path, monkeypatch, capsys):
    """sh and buildkite script the jobs that have a launch and say in one line per reason which they leave
    out; eval-only jobs get scripts of their own beside the throughput job of the same point."""
    monkeypatch.chdir(
        # the H100 key's agentic rows have no launch (upstream has no script for it); the vLLM key's replay a
        # trace
        with_entry(
            checkout,
            tmp_path,
            ["qwen3.5-fp8-h100-sglang-agentic", "dsv4-fp4-b200-vllm-agentic-mtp", "dsr1-fp8-h200-sglang"],
        )
    )
    code, out, err = cli(monkeypatch, capsys, "changelog", "jobs", "--base-ref", "HEAD^", "--format", "json")
    jobs = json.loads(out)
    code, out, _ = cli(monkeypatch, capsys, "changelog", "jobs", "--base-ref", "HEAD^", "--json")
    assert code in (0, None) and json.loads(out) == {
        "schema": "servelab.jobs",
        "schema_version": 2,
        "jobs": jobs,
    }
    code, out, err = cli(monkeypatch, capsys, "changelog", "jobs", "--base-ref", "HEAD^", "--format", "json")
    missing = [j for j in jobs if j["launch"] is None]
    assert code in (0, None) and missing and all(j["scenario-type"] == "agentic-coding" for j in missing)
    assert err.count("\n") == 1 and f"note: {len(missing)} of {len(jobs)} jobs have no launch" in err
    scripts = tmp_path / "scripts"
    code, out, err = cli(
        monkeypatch,
        capsys,
        "changelog",
        "jobs",
        "--base-ref",
        "HEAD^",
        "--format",
        "sh",
        "--out",
        str(scripts),
    )
    assert code in (0, None) and f"note: {len(missing)} of {len(jobs)} jobs are left out" in err
    assert len(list(scripts.iterdir())) == len(jobs) - len(missing) == len(out.splitlines())
    assert any(p.name.endswith("-evals.sh") for p in scripts.iterdir())
    code, out, err = cli(
        monkeypatch, capsys, "changelog", "jobs", "--base-ref", "HEAD^", "--format", "buildkite"
    )
    assert code in (0, None) and out.count("- label: ") == len(jobs) - len(missing)


@pytest.mark.slow  # 3.0 s of CPU a case: a git checkout and whole sweeps of it
def test_cli_refuses_scripts_when_no_row_has_a_launch(checkout, tmp_path, monkeypatch, capsys):
    # upstream has no agentic script for this key: none of its rows has a launch
    monkeypatch.chdir(with_entry(checkout, tmp_path, ["qwen3.5-fp8-h100-sglang-agentic"]))
    code, out, err = cli(
        monkeypatch, capsys, "changelog", "jobs", "--base-ref", "HEAD^", "--format", "buildkite"
    )
    assert (
        code == 2
        and out == ""
        and err.splitlines()[-1]
        == ("error: --format buildkite: no job has a launch to script; --format json lists them")
    )
    assert "Traceback" not in err


@pytest.mark.slow  # 0.9 s of CPU a case: a git checkout and whole sweeps of it
def test_a_servelab_checkout_finds_its_own_changelog_from_any_folder_of_it(tmp_path, monkeypatch, capsys):
    """A servelab checkout keeps its store in src/servelab/recipes/data; the servelab that runs is another one
    (an installed package, whose recipes this checkout does not track): the change read is this checkout's."""
    root = tmp_path / "servelab"
    store = root / "src" / "servelab" / "recipes" / "data"
    shutil.copytree(DATA_DIR, store)
    (root / "docs").mkdir()
    (root / "docs" / "run.md").write_text("# run\n")
    git(root, "init", "-q")
    for opt in ("user.email=t@example.com", "user.name=t", "commit.gpgsign=false"):
        git(root, "config", *opt.split("="))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    entry = '\n- config-keys:\n    - "*-h200-*"\n  description:\n    - "Run the H200 recipes again"\n'
    entry += "  pr-link: XXX\n"
    with (store / "perf-changelog.yaml").open("a") as f:
        f.write(entry)
    git(root, "commit", "-qam", "an entry")
    for where in (root, root / "docs"):
        monkeypatch.chdir(where)
        code, out, err = cli(monkeypatch, capsys, "changelog", "validate", "--base-ref", "HEAD^", "--json")
        assert code in (0, None), err
        assert json.loads(out)["new_entries"] == 1


@pytest.mark.slow  # 3.5 s of CPU a case: a git checkout and whole sweeps of it
def test_an_inferencex_checkout_from_a_subfolder(checkout, monkeypatch):
    monkeypatch.chdir(checkout / "configs")
    change = open_change(None, "HEAD^", "HEAD")
    assert change.problems == [] and len(change.added) == 1
