"""Values as people read them in servelab's human output: numbers without exponents (`14,460`, not
`1.446e+04`) and mappings and lists as words (`roofline 324, measured 12`, not `{'roofline': 324, ...}`).
The --json answers carry the exact values; this is only how text shows them."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any


def number(x: float, digits: int = 4, grouped: bool = True) -> str:
    """`digits` significant digits, never an exponent: 1000 and above whole (grouped: `14,460`), below that as
    many decimals as the digits need (`12.35`, `0.0001235`); inf and nan as such. Without `grouped` it is
    Python's `:g` where that has no exponent (a value the user typed, shown as typed)."""
    comma = "," if grouped else ""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:{comma}}"
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:{comma}.0f}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    text = f"{x:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def typed(x: float) -> str:
    """A value as the user typed it (a limit, a rate): Python's `:g` without its exponent."""
    return number(x, 6, grouped=False)


def factor(x: float) -> str:
    """A ratio or factor to three significant digits (`0.853`, `1.5`), never an exponent."""
    return number(x, 3, grouped=False)


def value(v: Any, digits: int = 4) -> str:
    """Any answer's value as words: numbers by number(), a mapping as `key value, ...` (nested mappings in
    parentheses), a list comma-separated, None as '-', booleans as yes / no."""
    if v is None:
        return "-"
    if isinstance(v, bool | int | float):
        return number(v, digits)
    if isinstance(v, Mapping):
        parts = []
        for k, item in v.items():
            shown = value(item, digits)
            parts.append(f"{k} ({shown})" if isinstance(item, Mapping) and item else f"{k} {shown}")
        return ", ".join(parts) or "-"
    if isinstance(v, list | tuple | set | frozenset):
        return ", ".join(value(item, digits) for item in v) or "-"
    return str(v)


def given_width() -> int | None:
    """The width a pipe is given: COLUMNS when it is a positive number (a CI log may set it), else None."""
    text = os.environ.get("COLUMNS", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None
