"""The top-level fields the user's InferenceX checkout's own validator lets a master entry carry.

InferenceX's generator validates every master entry before it prints a row (`validate_master_config` in
`utils/matrix_logic/validation.py`): a single-node entry against `SingleNodeMasterConfigEntry`, a multinode
one against `MultiNodeMasterConfigEntry`, pydantic models that forbid extra fields. A field one checkout's
validator does not declare (a pull request that writes a newer schema's `router:` on an older base) makes
that checkout's generator refuse the whole sweep, so servelab, which reads newer schemas too, refuses it as
well. Read from the source (parsed, never run): each model's annotated fields by their alias (a string, or
a member of its `Fields` enum) and, where it populates by name, by their name too. A model that is missing,
or that does not forbid extras, constrains nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

# Where the validator sits in a checkout, from its top.
VALIDATOR = Path("utils") / "matrix_logic" / "validation.py"
# The kind of entry (as matrix.py names it) -> the model InferenceX validates it with.
ENTRY_MODELS = {"single-node": "SingleNodeMasterConfigEntry", "multinode": "MultiNodeMasterConfigEntry"}


def _enum_values(tree: ast.Module, name: str) -> dict[str, str]:
    """MEMBER -> value of the string enum `name` defined in the module."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return {
                stmt.targets[0].id: stmt.value.value
                for stmt in node.body
                if isinstance(stmt, ast.Assign)
                and isinstance(stmt.targets[0], ast.Name)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            }
    return {}


def _keyword(call: ast.expr, name: str) -> ast.expr | None:
    if isinstance(call, ast.Call):
        return next((k.value for k in call.keywords if k.arg == name), None)
    return None


def _string(node: ast.expr | None, enums: dict[str, str]) -> str | None:
    """A string literal, or `Fields.MEMBER.value`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (
        isinstance(node, ast.Attribute)
        and node.attr == "value"
        and isinstance(node.value, ast.Attribute)
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "Fields"
    ):
        return enums.get(node.value.attr)
    return None


def _accepted(model: ast.ClassDef, enums: dict[str, str]) -> frozenset[str] | None:
    """The keys the model accepts, or None when it accepts any (it does not forbid extras)."""
    config = next(
        (
            s.value
            for s in model.body
            if isinstance(s, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "model_config" for t in s.targets)
        ),
        None,
    )
    if config is None or _string(_keyword(config, "extra"), enums) != "forbid":
        return None
    by_name = (
        isinstance(populate := _keyword(config, "populate_by_name"), ast.Constant) and populate.value is True
    )
    keys: set[str] = set()
    for stmt in model.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        alias = _string(_keyword(stmt.value, "alias"), enums) if stmt.value is not None else None
        keys.add(alias or stmt.target.id)
        if by_name:
            keys.add(stmt.target.id)
    return frozenset(keys)


def entry_fields(text: str) -> dict[str, frozenset[str]] | None:
    """Kind of entry -> the top-level fields the validator's source accepts in it (a kind whose model
    accepts any field is left out); None when the source does not parse or constrains no kind."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    enums = _enum_values(tree, "Fields")
    models = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    out: dict[str, frozenset[str]] = {}
    for kind, name in ENTRY_MODELS.items():
        accepted = _accepted(models[name], enums) if name in models else None
        if accepted is not None:
            out[kind] = accepted
    return out or None
