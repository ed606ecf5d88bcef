"""The architecture holds: no import cycle between modules or packages, no `sys.path` manipulation.

The import graph is read from the source with `ast` (nothing is imported). Only module-level imports count:
they run when a module loads, so only they can form a cycle (`if TYPE_CHECKING:` ones are skipped).
`python tests/architecture/test_imports.py` prints the package graph as Mermaid (docs/architecture.md).
"""

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(tree: ast.Module):
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                stack.extend(handler.body)


def _resolve(node: ast.ImportFrom, current: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = current.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """Module -> the servelab modules it imports at load time."""
    files = {module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        edges = graph.setdefault(name, set())
        for node in _top_level_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(node, name, path.name == "__init__.py")
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target.startswith("servelab") and target != name:
                    edges.add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """servelab.X.Y... collapsed to its first-level package X; edges between different packages."""

    def top(name: str) -> str:
        parts = name.split(".")
        return parts[1] if len(parts) > 1 else "servelab"

    out: dict[str, set[str]] = {}
    for src, targets in graph.items():
        out.setdefault(top(src), set()).update(top(t) for t in targets if top(t) != top(src))
    return out


@pytest.mark.slow  # 1.3 s of CPU a case: parses every module of the package
def test_no_module_import_cycle():
    assert cycles(import_graph()) == []


@pytest.mark.slow  # 1.0 s of CPU a case: parses every module of the package
def test_packages_form_layers():
    assert cycles(package_graph(import_graph())) == []


def test_no_sys_path_manipulation():
    pattern = re.compile(r"sys\.path\.(insert|append|extend)|spec_from_file_location")
    offenders = [
        str(path.relative_to(REPO))
        for folder in ("src", "tests", "benchmarks", "accuracy", "scripts")
        for path in (REPO / folder).rglob("*.py")
        if path != Path(__file__).resolve() and pattern.search(path.read_text())
    ]
    assert offenders == []


@pytest.mark.slow  # 1.0 s of CPU a case: parses every module of the package
def test_the_documented_picture_is_current():
    doc = (REPO / "docs" / "architecture.md").read_text()
    assert f"```mermaid\n{mermaid()}\n```" in doc, (
        "run this file and paste its output into docs/architecture.md"
    )


def mermaid() -> str:
    graph = package_graph(import_graph())
    lines = ["graph TD"]
    for src in sorted(graph):
        lines += [f"  {src} --> {dst}" for dst in sorted(graph[src])]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(mermaid() + "\n")
