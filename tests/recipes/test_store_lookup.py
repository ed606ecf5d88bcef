"""Where the commands find recipes and the changelog: --dir, $SERVELAB_RECIPES_DIR, ./configs, else the
shipped recipes; the same for sweep and changelog, also when servelab is installed outside the checkout."""

import json
import os
import shutil

import pytest
from clirun import servelab
from gitkit import git

from servelab.recipes.lock import compute_fingerprints
from servelab.recipes.recipe_store import DATA_DIR, LOCK, lock_text, open_store

ENTRY = '- config-keys:\n    - {key}\n  description:\n    - "{what}"\n  pr-link: XXX\n'


def run(*args, cwd, env=None):
    return servelab(*args, cwd=cwd, env=env)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's git checkout holding nothing but a changelog for the shipped recipes."""
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    git(root, "config", "commit.gpgsign", "false")
    git(root, "commit", "-q", "--allow-empty", "-m", "empty")
    monkeypatch.delenv("SERVELAB_RECIPES_DIR", raising=False)
    return root


def commit(root, message="change"):
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)


def test_changelog_with_recipes_outside_the_checkout(project):
    """As after `pip install .`: the recipes live in site-packages, the changelog in the user's checkout."""
    (project / "perf-changelog.yaml").write_text(ENTRY.format(key="llama70b-fp8-h200-vllm", what="first run"))
    commit(project)
    r = run("changelog", "validate", "--base-ref", "HEAD~1", cwd=project)
    assert r.returncode == 0 and r.stdout == "ok: 1 new entry\n", r.stderr
    r = run("changelog", "jobs", "--base-ref", "HEAD~1", "--format", "json", cwd=project)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows and {row["config-key"] for row in rows} == {"llama70b-fp8-h200-vllm"}
    # the same jobs as sweep finds for the key, since both read the same recipes
    r = run("sweep", "llama70b-fp8-h200-vllm", "--format", "json", cwd=project)
    assert {row["fingerprint"] for row in json.loads(r.stdout)} == {row["fingerprint"] for row in rows}


def test_changelog_flag_and_bad_entries(project):
    (project / "ci").mkdir()
    (project / "ci" / "ledger.yaml").write_text(ENTRY.format(key="no-such-key", what="typo"))
    commit(project)
    r = run("changelog", "validate", "--base-ref", "HEAD~1", "--changelog", "ci/ledger.yaml", cwd=project)
    assert r.returncode == 2 and "config key 'no-such-key' is not a config key" in r.stderr
    r = run("changelog", "validate", "--base-ref", "HEAD~1", cwd=project)
    assert r.returncode == 2 and "HEAD:./perf-changelog.yaml: not found" in r.stderr


def test_not_a_git_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv("SERVELAB_RECIPES_DIR", raising=False)
    r = run("changelog", "validate", "--base-ref", "HEAD", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "is not inside a git checkout; the changelog commands compare git refs" in r.stderr


def test_configs_dir_is_the_default_store(project):
    """A checkout with its own store in ./configs: sweep and changelog use it (the changelog at the refs)."""
    shutil.copytree(DATA_DIR, project / "configs")
    commit(project, "store")
    recipes = project / "configs" / "recipes" / "b200.yaml"
    recipes.write_text(recipes.read_text().replace("max-num-seqs: 256", "max-num-seqs: 512"))
    (project / "configs" / LOCK).write_text(lock_text(compute_fingerprints(open_store(project / "configs"))))
    with open(project / "configs" / "perf-changelog.yaml", "a") as f:
        f.write("\n" + ENTRY.format(key="dsv4f-fp8-b200-vllm", what="more seqs"))
    commit(project)
    r = run("changelog", "validate", "--base-ref", "HEAD~1", cwd=project)
    assert r.returncode == 0 and r.stdout == "ok: 1 new entry\n", r.stderr
    r = run("sweep", "dsv4f-fp8-b200-vllm", "--format", "json", cwd=project)
    assert r.returncode == 0 and "--max-num-seqs" in r.stdout
    assert all("512" in row["launch"]["argv"] for row in json.loads(r.stdout))
    # the environment variable still wins over ./configs, --dir over both
    env = {**os.environ, "SERVELAB_RECIPES_DIR": str(DATA_DIR)}
    r = run("sweep", "dsv4f-fp8-b200-vllm", "--format", "json", cwd=project, env=env)
    assert all("256" in row["launch"]["argv"] for row in json.loads(r.stdout))
    r = run("sweep", "dsv4f-fp8-b200-vllm", "--dir", "configs", "--format", "json", cwd=project, env=env)
    assert all("512" in row["launch"]["argv"] for row in json.loads(r.stdout))


def test_store_in_an_ignored_directory_counts_as_outside(project):
    """A virtual environment inside the checkout (ignored by git) holds the installed recipes."""
    venv_data = project / ".venv" / "site-packages" / "servelab" / "recipes" / "data"
    shutil.copytree(DATA_DIR, venv_data)
    (project / ".gitignore").write_text(".venv/\n")
    (project / "perf-changelog.yaml").write_text(ENTRY.format(key="gptoss-fp4-h200-vllm", what="x"))
    commit(project)
    r = run("changelog", "validate", "--base-ref", "HEAD~1", "--dir", str(venv_data), cwd=project)
    assert r.returncode == 0 and r.stdout == "ok: 1 new entry\n", r.stderr
