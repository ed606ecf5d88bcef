"""Shared fixtures: a copy of the shipped recipe store, temporary git repositories holding one, and a cache
folder of each test's own."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gitkit import git
from once_a_run import once_a_run

from servelab.recipes.lock import compute_fingerprints
from servelab.recipes.recipe_store import DATA_DIR, LOCK, lock_text, open_store


@pytest.fixture(autouse=True)
def _capture_cache(tmp_path_factory, monkeypatch) -> Path:
    """Launch captures a sweep caches (a checkout whose script changed) go to a folder of the test's own,
    never to the user's cache."""
    folder = tmp_path_factory.mktemp("servelab-cache")
    monkeypatch.setenv("SERVELAB_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def store_dir(tmp_path) -> Path:
    """A writable copy of the shipped store (recipes, runners, changelog, lock)."""
    d = tmp_path / "store"
    shutil.copytree(DATA_DIR, d)
    return d


@pytest.fixture
def shipped():
    return open_store(DATA_DIR)


class Repo:
    """A throwaway git repo with the shipped store under data/; commit() returns the new commit id."""

    def __init__(self, root: Path):
        self.root = root
        self.data = root / "data"
        root.mkdir()
        git(root, "init", "-q")
        git(root, "config", "user.email", "t@example.com")
        git(root, "config", "user.name", "t")
        git(root, "config", "commit.gpgsign", "false")
        shutil.copytree(DATA_DIR, self.data)

    def commit(self, message: str = "change") -> str:
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "--allow-empty", "-m", message)
        return git(self.root, "rev-parse", "HEAD")

    @property
    def changelog(self) -> Path:
        return self.data / "perf-changelog.yaml"

    def append(self, text: str) -> None:
        with open(self.changelog, "a", encoding="utf-8", newline="") as f:
            f.write(text)

    def relock(self) -> None:
        (self.data / LOCK).write_text(lock_text(compute_fingerprints(open_store(self.data))))


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Repo:
    r = Repo(tmp_path / "repo")
    monkeypatch.chdir(r.root)
    return r


@pytest.fixture(scope="session")
def ix_conformance() -> dict[str, dict]:
    """`scripts/ix_launch.py conformance`, run once a test run (tests/once_a_run.py): per key of the pinned
    InferenceX store, how servelab's launches differ from the capture of upstream's scripts (a few seconds: it
    renders every job). The launch-profile and agentic-launch tests both read it."""
    return once_a_run("ix_conformance", _conformance)


def _conformance() -> dict[str, dict]:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(root / "scripts" / "ix_launch.py"), "conformance"],
        cwd=root, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
