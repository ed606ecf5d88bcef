"""Arrival offsets (seconds from the run start), computed once from the seed.

Open loop: vLLM's gamma gaps (shape = burstiness, mean = 1/rate), cumulated and, without ramp-up, rescaled so
the last arrival is at n/rate exactly (what vLLM does to stabilise throughput across seeds). A send time is
always start + offset[i]; nothing accumulates sleeps, so the schedule never drifts when the server or client
slows. Closed loop (rate inf): no offsets; concurrency slots pace the requests.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy imported when first used (servelab.lazy_numpy says why)
    import numpy as np
else:
    from servelab.lazy_numpy import np


def rate_at(
    index: int, total: int, rate: float, strategy: str | None, start: float | None, end: float | None
) -> float:
    """vLLM's _get_current_request_rate: the rate in force for request `index` during a ramp-up."""
    if strategy and start is not None and end is not None:
        progress = index / max(total - 1, 1)
        if strategy == "linear":
            return start + (end - start) * progress
        if strategy == "exponential":
            return start * (end / start) ** progress
        raise ValueError(f"unknown ramp-up strategy {strategy!r}")
    return rate


def arrival_offsets(
    num: int,
    rate: float,
    burstiness: float = 1.0,
    seed: int = 0,
    ramp_up_strategy: str | None = None,
    ramp_up_start_rps: float | None = None,
    ramp_up_end_rps: float | None = None,
) -> list[float] | None:
    """Offsets in seconds for `num` arrivals, or None for a closed loop (rate inf, no ramp-up)."""
    offsets = arrival_offset_array(
        num, rate, burstiness, seed, ramp_up_strategy, ramp_up_start_rps, ramp_up_end_rps
    )
    return offsets.tolist() if offsets is not None else None


def arrival_offset_array(
    num: int,
    rate: float,
    burstiness: float = 1.0,
    seed: int = 0,
    ramp_up_strategy: str | None = None,
    ramp_up_start_rps: float | None = None,
    ramp_up_end_rps: float | None = None,
) -> np.ndarray | None:
    """`arrival_offsets` as a float64 array (8 bytes an arrival, for schedules of millions)."""
    if num <= 0:
        return np.empty(0)
    if math.isinf(rate) and ramp_up_strategy is None:
        return None
    rng = np.random.default_rng(seed)
    gaps = np.empty(num)
    for i in range(num):
        r = rate_at(i, num, rate, ramp_up_strategy, ramp_up_start_rps, ramp_up_end_rps)
        if math.isinf(r):
            gaps[i] = 0.0
        elif math.isinf(burstiness):
            gaps[i] = 1.0 / r
        else:
            gaps[i] = rng.gamma(shape=burstiness, scale=1.0 / (r * burstiness))
    offsets = np.cumsum(gaps)
    if ramp_up_strategy is None and offsets[-1] > 0:
        offsets *= (num / rate) / offsets[-1]
    return offsets


def split_round_robin(indices: list[int], num_workers: int) -> list[list[int]]:
    """Worker k gets items k, k+W, k+2W...: every worker sees the whole time span of the schedule."""
    return [indices[k::num_workers] for k in range(num_workers)]


def split_limit(limit: int | None, num_workers: int) -> list[int | None]:
    """Split a concurrency limit across workers so the shares add up to the limit (each at least 1)."""
    if limit is None:
        return [None] * num_workers
    base, extra = divmod(limit, num_workers)
    return [max(1, base + (1 if k < extra else 0)) for k in range(num_workers)]
