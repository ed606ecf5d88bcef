"""A python whose PYTHONPATH holds accuracy/, as `python accuracy/<script>.py` runs: the accuracy scripts are
not a package, so tests ask them in a process of their own rather than loading them by path
(tests/architecture/test_scripts.py does the same for scripts/)."""

import os
import subprocess
import sys
from pathlib import Path

ACCURACY = Path(__file__).resolve().parents[1] / "accuracy"


def run_accuracy_python(
    args: list[str], cwd: Path | None = None, stdin: str | None = None, returncode: int = 0
) -> str:
    """`python ARGS` with accuracy/ on PYTHONPATH; its stdout, or its stderr where `returncode` (the exit
    status expected) is not 0 (another exit fails the test with stderr)."""
    path = os.pathsep.join(filter(None, [str(ACCURACY), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        timeout=300,
        check=False,
    )
    assert done.returncode == returncode, done.stderr
    return done.stdout if returncode == 0 else done.stderr
