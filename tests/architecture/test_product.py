"""No module of the wheel reads tests/ or installs packages (issue 26): what a user installs works without a
servelab checkout, and never changes the environment it runs in (optional pieces are extras, or another
environment the user names).

Read from the source with `ast`, nothing imported. A read of tests/ is a path built from a "tests" component
or a string starting "tests/"; an install is an argv holding pip and install (or uv pip, ensurepip, -m venv),
a shell string that runs pip install, or the venv / ensurepip / pip modules used from code. Messages that tell
the user to `pip install` something are not installs and pass.
"""

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "servelab"
RUNS = {"run", "call", "check_call", "check_output", "Popen", "system", "execv", "execvp", "spawnv"}
SHELL_INSTALL = re.compile(r"\bpip3?\s+install\b|\bensurepip\b|-m\s+venv\b|\buv\s+pip\b")


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def reads_of_tests(tree: ast.AST) -> list[int]:
    """Lines that build a path into tests/: a "tests" path component, or a string starting with tests/."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and "tests" in _strings(node):
            lines.append(node.lineno)
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("tests/")
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and "tests" in [
            a.value for a in node.args if isinstance(a, ast.Constant)
        ]:  # Path(root, "tests", ...), os.path.join(root, "tests")
            lines.append(node.lineno)
    return sorted(set(lines))


def installs(tree: ast.AST) -> list[int]:
    """Lines that install packages or make environments."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple):
            words = set(_strings(node))
            if {"pip", "install"} <= words or "ensurepip" in words or {"-m", "venv"} <= words:
                lines.append(node.lineno)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            owner = (
                func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
            )
            if name in RUNS and any(SHELL_INSTALL.search(s) for a in node.args for s in _strings(a)):
                lines.append(node.lineno)
            if owner in ("venv", "ensurepip", "pip") or name == "EnvBuilder":
                lines.append(node.lineno)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(n.split(".")[0] in ("venv", "ensurepip", "pip") for n in names):
                lines.append(node.lineno)
    return sorted(set(lines))


def offenders(check) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(REPO))
        found += [f"{rel}:{line}" for line in check(ast.parse(path.read_text(), rel))]
    return found


@pytest.mark.slow  # 1.2 s of CPU a case: parses every module of the wheel
def test_no_module_of_the_wheel_reads_tests():
    assert offenders(reads_of_tests) == []


@pytest.mark.slow  # 2.0 s of CPU a case: parses every module of the wheel
def test_no_module_of_the_wheel_installs_packages():
    assert offenders(installs) == []


def test_the_checks_see_what_they_look_for():
    """The forms the package had (calibrate/aic.py's venv and pip install, recipes/engines/upstream.py's
    tests/data) are found; a message telling the user what to install is not."""
    caught = """
subprocess.run([sys.executable, "-m", "venv", str(venv)])
subprocess.run([str(py), "-m", "pip", "install", "--quiet", f"pkg=={v}"], check=True)
os.system("python -m pip install pkg")
IX = ROOT / "tests" / "data" / "inferencex"
data = Path("tests/data/x.json").read_text()
import venv
"""
    tree = ast.parse(caught)
    assert reads_of_tests(tree) == [5, 6]
    assert installs(tree) == [2, 3, 4, 7]
    fine = """
raise ServelabError("torch is not installed (pip install 'servelab[collect]')")
HOW = "pip install 'servelab[aic]', or name a python with --aic-python PATH"
subprocess.run(["git", "-C", str(root), "status", "--porcelain", "tests"])
"""
    assert installs(ast.parse(fine)) == []
