"""The scripts under scripts/, accuracy/ and benchmarks/ that import servelab import cleanly, so a rename or a
removed name in the package fails here and not the next time someone runs the script.

Scripts are not a package: each folder's scripts are imported by name in a fresh python whose PYTHONPATH holds
that folder, as `python folder/script.py` would find them and their siblings (no path edits in code, as
test_imports.py requires). Importing runs no script: each keeps its work under `if __name__ == "__main__":`,
so an import prints nothing and writes nothing (checked in an empty working directory).
"""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("scripts", "accuracy", "benchmarks")
IMPORT_EACH = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as e:
        failed.append(f"{name}: {type(e).__name__}: {e}")
sys.stderr.write("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def imports_servelab(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "servelab" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "servelab":
            return True
    return False


def scripts_of(folder: str) -> list[str]:
    return sorted(p.stem for p in (REPO / folder).glob("*.py") if imports_servelab(p))


def test_the_scripts_that_use_servelab_are_found():
    """Not vacuous: the scripts this test exists for are among those it imports."""
    assert {"behaviour_snapshot", "ix_launch"} <= set(scripts_of("scripts"))
    assert {"sim_vs_vllm_cpu", "twin_vs_vllm_cpu", "calibrate_engines"} <= set(scripts_of("accuracy"))
    assert {"speed", "loadgen_vs_vllm"} <= set(scripts_of("benchmarks"))


@pytest.mark.slow  # 1.6 s of CPU a case: imports every script in processes of its own
@pytest.mark.parametrize("folder", FOLDERS)
def test_scripts_import_without_running(folder, tmp_path):
    names = scripts_of(folder)
    path = os.pathsep.join(filter(None, [str(REPO / folder), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, *names],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # importing ran nothing that prints
    assert list(tmp_path.iterdir()) == []  # nor anything that writes
