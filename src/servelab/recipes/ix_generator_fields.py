"""Which fields an InferenceX generator prints in each kind of row, read from its source (parsed, never run).

The generator builds each row as a dict literal keyed by `Fields.<MEMBER>.value` (and sets a few more keys by
`entry[Fields.<MEMBER>.value] = ...` in the same function); a pool (prefill, decode) is the arm's mapping
as written, since mid-2026 completed by a helper's literal with the pool's pp, dcp-size and pcp-size. The
kinds: `fixed` and `fixed-multinode` (fixed-seq-len rows), `agentic` and `agentic-multinode`, `pool`. A
member's field name is its name in lower case with hyphens (DCP_SIZE -> dcp-size), as InferenceX names them.
"""

from __future__ import annotations

import ast

ROW_KINDS = ("fixed", "fixed-multinode", "agentic", "agentic-multinode")
POOL_LAYOUT = frozenset({"PP", "DCP_SIZE", "PCP_SIZE"})


def _member(node: ast.AST | None) -> str | None:
    """MEMBER of an expression `Fields.MEMBER.value`, else None."""
    if not (isinstance(node, ast.Attribute) and node.attr == "value"):
        return None
    inner = node.value
    if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) and inner.value.id == "Fields":
        return inner.attr
    return None


def _field(member: str) -> str:
    return member.lower().replace("_", "-")


def _assigned(func: ast.AST) -> set[str]:
    """Members set by `x[Fields.MEMBER.value] = ...` in a function."""
    out = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and (name := _member(target.slice)):
                    out.add(name)
    return out


def _kind(node: ast.Dict, keys: set[str]) -> str | None:
    if {"IMAGE", "MODEL"} <= keys:
        agentic = any(
            _member(k) == "SCENARIO_TYPE" and isinstance(v, ast.Constant) and v.value == "agentic-coding"
            for k, v in zip(node.keys, node.values, strict=True)
        )
        return ("agentic" if agentic else "fixed") + ("-multinode" if "PREFILL" in keys else "")
    if keys & POOL_LAYOUT:
        return "pool"
    return None


def printed_fields(text: str) -> dict[str, frozenset[str]] | None:
    """Row kind -> the fields the generator prints in it (the first literal of each kind: the full sweep's,
    which comes first); no `pool` entry when pools are printed as written. None when the source does not
    parse or holds no row literal (nothing to follow)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    out: dict[str, frozenset[str]] = {}
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        assigned = _assigned(func)
        for node in ast.walk(func):
            if not isinstance(node, ast.Dict):
                continue
            keys = {m for k in node.keys if (m := _member(k))}
            kind = _kind(node, keys)
            if kind is not None and kind not in out:
                extra = assigned if kind != "pool" else set()
                out[kind] = frozenset(_field(m) for m in keys | extra)
    return out if any(kind in out for kind in ROW_KINDS) else None
