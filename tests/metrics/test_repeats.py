"""Median and the order-statistic confidence interval of the median over repetitions."""

import itertools
import math

import pytest

from servelab.metrics.repeats import summarize


def test_fewer_than_three_runs_give_no_interval():
    s = summarize([3.0, 1.0])
    assert s.median == 2.0 and s.ci_level is None
    assert s.dump()["ci"] == "n too small"


@pytest.mark.parametrize("n, level", [(3, 0.75), (5, 0.9375)])
def test_small_n_gives_min_max_with_its_real_coverage(n, level):
    values = [float(v) for v in range(n, 0, -1)]
    s = summarize(values)
    assert (s.ci_low, s.ci_high) == (1.0, float(n))
    assert s.ci_level == pytest.approx(level)


def _coverage(n: int, k: int) -> float:
    """P(x_(k) <= median < x_(n+1-k)) counted over every outcome of n fair coin flips (below/above median)."""
    hits = 0
    for flips in itertools.product((0, 1), repeat=n):
        below = sum(flips)
        hits += k <= below <= n - k
    return hits / 2**n


@pytest.mark.parametrize("n", [6, 9, 12, 20])
def test_interval_is_the_narrowest_reaching_95_percent(n):
    s = summarize([float(i) for i in range(1, n + 1)])
    k = int(s.ci_low)  # values are 1..n, so the bound is its own rank
    assert s.ci_high == n + 1 - k
    assert s.ci_level == pytest.approx(_coverage(n, k))
    assert s.ci_level >= 0.95
    assert k + 1 > n // 2 or _coverage(n, k + 1) < 0.95  # one rank narrower falls short
    assert math.isclose(s.median, (n + 1) / 2)
