"""Compare two runs, or two groups of runs: the same metric side by side, its change in %, and a p-value.

Each side is a run id (or a unique prefix) or a run name standing for every run with that name. A metric is
keyed by (stage, config, metric name); its values on a side are all repetitions of all the side's runs. The
figure shown per side is the median (perf-eval reports the median of repetitions); the change is
(median B - median A) / median A. With two or more values on both sides, `p_value` is the two-sided p-value of
Welch's t-test on the means (unequal variances), computed here with math only: small p (say < 0.05) means the
difference is unlikely to be repetition noise.
"""

import fnmatch
import math
import statistics
from dataclasses import dataclass

from servelab.results.store import Run, Store

Key = tuple[str, str, str]  # stage, config, metric name


@dataclass(frozen=True)
class Row:
    stage: str
    config: str
    metric: str
    unit: str
    a: list[float]
    b: list[float]
    median_a: float
    median_b: float
    change_pct: float | None  # None when median A is 0
    p_value: float | None  # None unless both sides have two or more values


@dataclass(frozen=True)
class Comparison:
    runs_a: list[Run]
    runs_b: list[Run]
    rows: list[Row]
    only_a: int  # metrics that only side A has
    only_b: int


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes' betacf)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for aa in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def welch_p_value(a: list[float], b: list[float]) -> float | None:
    """Two-sided p-value of Welch's t-test; None with fewer than two values on a side."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(b) - statistics.fmean(a)
    if va + vb == 0.0:
        return 1.0 if diff == 0.0 else 0.0
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def _values(
    store: Store, runs: list[Run], patterns: list[str]
) -> tuple[dict[Key, list[float]], dict[Key, str]]:
    values: dict[Key, list[float]] = {}
    units: dict[Key, str] = {}
    for run in runs:
        for m in store.metrics(run.id):
            if m.value is None or (patterns and not any(fnmatch.fnmatch(m.name, p) for p in patterns)):
                continue
            key = (m.stage, m.config, m.name)
            values.setdefault(key, []).append(m.value)
            units[key] = m.unit
    return values, units


def compare(store: Store, ref_a: str, ref_b: str, patterns: list[str] | None = None) -> Comparison:
    """Side A against side B; `patterns` (shell globs such as `*ttft*`) narrow the metrics."""
    runs_a, runs_b = store.find_runs(ref_a), store.find_runs(ref_b)
    values_a, units = _values(store, runs_a, patterns or [])
    values_b, _ = _values(store, runs_b, patterns or [])
    rows = []
    for key in sorted(values_a.keys() & values_b.keys()):
        a, b = values_a[key], values_b[key]
        median_a, median_b = statistics.median(a), statistics.median(b)
        rows.append(
            Row(
                *key,
                unit=units[key],
                a=a,
                b=b,
                median_a=median_a,
                median_b=median_b,
                change_pct=(median_b - median_a) / abs(median_a) * 100.0 if median_a else None,
                p_value=welch_p_value(a, b),
            )
        )
    return Comparison(
        runs_a,
        runs_b,
        rows,
        only_a=len(values_a.keys() - values_b.keys()),
        only_b=len(values_b.keys() - values_a.keys()),
    )
