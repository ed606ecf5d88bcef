"""The median of repeated runs and a distribution-free confidence interval for it.

The interval is the order-statistic interval of the median: for n sorted values, [x_(k), x_(n+1-k)] covers the
true median with probability 1 - 2 * P(Binomial(n, 1/2) <= k - 1), whatever the distribution. With few runs
the widest interval (min, max) is all there is, and its coverage is below 95 % (75 % for n = 3, 93.75 % for
n = 5); the level reported is the one the interval really has. Below 3 runs no interval is given.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from servelab.readable import number

MIN_RUNS = 3
METHOD = "order-statistic CI of the median"


def median(values: list[float]) -> float:
    return float(statistics.median(values))


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    ci_low: float | None = None
    ci_high: float | None = None
    ci_level: float | None = None  # the interval's exact coverage, e.g. 0.75

    def dump(self) -> dict:
        out: dict = {"n": self.n, "median": self.median}
        if self.ci_level is None:
            out["ci"] = "n too small" if self.n < MIN_RUNS else None
        else:
            out |= {"ci_low": self.ci_low, "ci_high": self.ci_high, "ci_level": self.ci_level, "ci": METHOD}
        return out

    def ci_text(self) -> str:
        if self.ci_level is None or self.ci_low is None or self.ci_high is None:
            return "n too small"
        return f"[{number(self.ci_low)}, {number(self.ci_high)}] ({self.ci_level:.1%})"


def _binom_cdf_half(k: int, n: int) -> float:
    """P(Binomial(n, 1/2) <= k)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def summarize(values: list[float], level: float = 0.95) -> Summary:
    """Median and the narrowest order-statistic interval whose coverage is at least `level` (the widest,
    min to max, when no interval reaches it)."""
    xs = sorted(values)
    n = len(xs)
    mid = median(xs)
    if n < MIN_RUNS:
        return Summary(n, mid)
    k = 1  # 1-based rank of the lower bound
    while k + 1 <= n // 2 and 1 - 2 * _binom_cdf_half(k, n) >= level:
        k += 1
    return Summary(n, mid, xs[k - 1], xs[n - k], 1 - 2 * _binom_cdf_half(k - 1, n))
