"""git in a test's throwaway repository. A module of its own: a test's `from conftest import ...` could find
another folder's conftest (the tests folders are not packages)."""

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return r.stdout.strip()
