"""The one percentile rule and the distributions built on it.

A percentile interpolates linearly between ranks (numpy's default method, which `vllm bench serve` uses):
position (n - 1) * p / 100 in the sorted values. Plain Python so the simulator's path needs no array library;
the values are converted to ms before sorting, so results match what numpy gives on the ms values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def percentile(ordered: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100) of values sorted ascending; linear between the two nearest ranks."""
    pos = (len(ordered) - 1) * p / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def percentile_word(p: float) -> str:
    """vLLM's name for a percentile in a field name: 99 -> '99', 99.9 -> '99.9'."""
    return str(int(p)) if int(p) == p else str(p)


@dataclass(frozen=True)
class Distribution:
    """Mean, median, standard deviation (population), maximum and chosen percentiles of one metric, in ms.
    `percentiles` maps vLLM's percentile word ('99', '99.9') to the value."""

    mean: float
    median: float
    std: float
    max: float
    percentiles: dict[str, float]


def distribution_ms(values_s: Iterable[float], percentiles: Iterable[float]) -> Distribution:
    """The distribution of values given in seconds, reported in ms. An empty list reports zeros, as vLLM does
    (it takes the statistics of `values or 0`)."""
    ordered = sorted(v * 1000.0 for v in values_s) or [0.0]
    mean = sum(ordered) / len(ordered)
    std = math.sqrt(sum((v - mean) ** 2 for v in ordered) / len(ordered))
    return Distribution(
        mean=mean,
        median=percentile(ordered, 50),
        std=std,
        max=ordered[-1],
        percentiles={percentile_word(p): percentile(ordered, p) for p in percentiles},
    )


def weighted_distribution_ms(
    samples: Sequence[tuple[float, float]], percentiles: Iterable[float]
) -> Distribution:
    """Distribution of values given as (value_s, weight) runs: a stretch of `weight` identical values (the
    simulator's repeated decode steps) is one pair, so the list is never expanded.

    Percentiles interpolate between the centres of the runs (a run of weight w covers w / total of the ranks),
    which is not the same rule as `percentile` on the expanded list: it is the simulator's established ITL
    rule and its planner outputs depend on it."""
    pcts = list(percentiles)
    pairs = sorted((v * 1000.0, w) for v, w in samples if w > 0)
    if not pairs:
        return distribution_ms([], pcts)
    total = sum(w for _, w in pairs)
    centers, cum = [], 0.0
    for _, w in pairs:
        centers.append((cum + w / 2.0) / total * 100.0)
        cum += w
    values = [v for v, _ in pairs]
    mean = sum(v * w for v, w in pairs) / total
    return Distribution(
        mean=mean,
        median=_interp(50, centers, values),
        std=math.sqrt(sum(w * (v - mean) ** 2 for v, w in pairs) / total),
        max=values[-1],
        percentiles={percentile_word(p): _interp(p, centers, values) for p in pcts},
    )


def _interp(x: float, xs: list[float], ys: list[float]) -> float:
    """Piecewise-linear y(x) through the points (xs ascending), flat beyond the ends."""
    if x <= xs[0]:
        return ys[0]
    for i in range(1, len(xs)):
        if x <= xs[i]:
            f = (x - xs[i - 1]) / (xs[i] - xs[i - 1]) if xs[i] > xs[i - 1] else 0.0
            return ys[i - 1] + (ys[i] - ys[i - 1]) * f
    return ys[-1]
