"""The concurrency grammar: a ladder that multiplies from conc-start with the last value clamped to conc-end,
or an explicit conc-list. 3..20 gives 3, 6, 12, 20 (as InferenceX expands it)."""

from __future__ import annotations

import re

from servelab.errors import ServelabError


def ladder(start: int, end: int, step: int = 2) -> list[int]:
    if start < 1 or end < start:
        raise ServelabError(f"concurrency range {start}..{end}: expected 1 <= conc-start <= conc-end")
    if step < 2:
        raise ServelabError(f"step size {step}: expected an integer factor of at least 2")
    values = []
    c = start
    while c < end:
        values.append(c)
        c *= step
    values.append(end)  # the last rung is clamped to conc-end
    return values


def concurrencies(arm, step: int = 2) -> list[int]:
    """The distinct concurrencies of an arm, in increasing order (a sweep lists them as upstream writes them:
    recipes/matrix.py)."""
    if arm.conc_list is not None:
        return sorted(set(arm.conc_list))
    return ladder(arm.conc_start, arm.conc_end, step)


# InferenceX's names for the seq-len pairs it sweeps; its generator writes any other pair ISL_OSL.
SEQ_LEN_NAMES = {(1024, 1024): "1k1k", (8192, 1024): "8k1k"}
_SEQ_LEN_RE = re.compile(r"(\d+)(k?)(\d+)(k?)|(\d+)_(\d+)")


def seq_len_name(isl: int, osl: int) -> str:
    """8192/1024 -> '8k1k', as InferenceX names the pair in exp-names; unnamed pairs are 'ISL_OSL'."""
    return SEQ_LEN_NAMES.get((isl, osl), f"{isl}_{osl}")


def parse_seq_len(name: str) -> tuple[int, int]:
    """'8k1k' -> (8192, 1024); also any 'NkMk' pair and 'ISL_OSL'."""
    m = _SEQ_LEN_RE.fullmatch(name)
    if m is None or (m.group(1) and not (m.group(2) and m.group(4))):
        raise ServelabError(
            f"seq-len {name!r}: expected a name such as 1k1k or 8k1k, or ISL_OSL", field="seq_lens"
        )
    if m.group(5):
        return int(m.group(5)), int(m.group(6))
    return int(m.group(1)) * 1024, int(m.group(3)) * 1024
