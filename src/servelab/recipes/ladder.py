"""The concurrency grammar: a ladder that multiplies from conc-start with the last value clamped to conc-end,
or an explicit conc-list. 3..20 gives 3, 6, 12, 20 (as InferenceX expands it)."""

from __future__ import annotations

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
    if arm.conc_list is not None:
        return sorted(set(arm.conc_list))
    return ladder(arm.conc_start, arm.conc_end, step)


def seq_name(n: int) -> str:
    """8192 -> '8k', 1024 -> '1k'; InferenceX names seq-len pairs this way (8k1k)."""
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def seq_len_name(isl: int, osl: int) -> str:
    return seq_name(isl) + seq_name(osl)
