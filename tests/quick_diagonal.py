"""Matrices of hostile inputs (every field with every value): CI runs every pair, the quick tier
(`-m "not slow"`, the developer's loop) a diagonal of them, in which every field and every value appears
at least once. The pairs keep the ids the stacked `parametrize` decorators gave them ("row-column")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest


def pairs(rows: Iterable[Any], columns: Iterable[Any], row_ids: Iterable[object] | None = None) -> list:
    """Every (row, column) as a `pytest.param`; the pairs off the diagonal are marked slow. A row's id is
    its value, or its entry in `row_ids`."""
    rows, columns = list(rows), list(columns)
    names = list(rows if row_ids is None else row_ids)
    quick = {(n % len(rows), n % len(columns)) for n in range(max(len(rows), len(columns)))}
    return [
        pytest.param(row, column, id=f"{names[i]}-{column}",
                     marks=() if (i, j) in quick else pytest.mark.slow)
        for i, row in enumerate(rows)
        for j, column in enumerate(columns)
    ]  # fmt: skip
