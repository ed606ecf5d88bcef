"""Leave-one-out error of a table: each collected point predicted from the rest of its group, the way a query
between collected points would be answered.

Three kinds, kept apart because their errors differ by an order of magnitude:
- interpolated: the left-out point lies inside the remaining points' range (the headline figure);
- extrapolated: it lies beyond them, so boundary utilisation is held;
- borrowed: its whole group is left out and the nearest collected shape (other n, k; other heads; another
  model's bucket) answers -- what a query for a never-collected shape gets.
Errors are |predicted / measured - 1|; the band quantiles are of measured / predicted - 1, so that
[us * (1 + lo), us * (1 + hi)] covers 80 % of leave-one-out cases.
"""

import math

import numpy as np

from servelab.perfdb.interpolate import Index

KINDS = ("interpolated", "extrapolated", "borrowed")


def leave_one_out(index: Index) -> dict[str, list[float]]:
    """Log errors log(measured / predicted) per kind."""
    out: dict[str, list[float]] = {k: [] for k in KINDS}
    naxes = len(index.family.axes)
    by_latency = index.family.value == "latency"

    def predict_from(keep: list[int], axes, ys, lats, j: int) -> tuple[float, float]:
        sub_axes = [[a[i] for i in keep] for a in axes]
        points = index.build(sub_axes, [ys[i] for i in keep])
        points_lat = index.build(sub_axes, [lats[i] for i in keep]) if by_latency else None
        ref = lats[j] / math.exp(ys[j])
        return index.predict(points, points_lat, tuple(a[j] for a in axes), ref)

    for gkey in index.groups:
        axes, ys, lats, flags = index.group_log_ratios(gkey)
        n = len(ys)
        if n >= 2:
            for j in range(n):
                if not flags[j]:
                    continue  # a modelled row is no ground truth
                us, beyond = predict_from([i for i in range(n) if i != j], axes, ys, lats, j)
                out["extrapolated" if beyond > 1.0 else "interpolated"].append(math.log(lats[j] / us))
        if naxes == 2:
            # leaving one point out only tests the inner axis (its row still answers); queries fall between
            # outer values too (any batch size), so also predict each point with its whole outer row left out
            for o in set(axes[0]):
                keep = [i for i in range(n) if axes[0][i] != o]
                if not keep:
                    continue
                for j in (i for i in range(n) if axes[0][i] == o and flags[i]):
                    us, beyond = predict_from(keep, axes, ys, lats, j)
                    out["extrapolated" if beyond > 1.0 else "interpolated"].append(math.log(lats[j] / us))
        other = index.nearest_group(gkey, exclude=gkey)
        if other is not None:
            points = index._points(index.groups[other])
            for j in (i for i in range(n) if flags[i]):
                y, _ = index.interp(points, tuple(axes[a][j] for a in range(naxes)))
                out["borrowed"].append(ys[j] - y)
    return out


def summarize(log_errors: list[float]) -> dict:
    """n, median and p90 of |pred/meas - 1|, and the 10th/90th percentiles of meas/pred - 1 (the band)."""
    if not log_errors:
        return {"n": 0}
    d = np.asarray(log_errors)
    rel = np.abs(np.exp(-d) - 1.0)
    signed = np.exp(d) - 1.0
    return {
        "n": int(d.size),
        "median": round(float(np.median(rel)), 5),
        "p90": round(float(np.percentile(rel, 90)), 5),
        "lo": round(float(np.percentile(signed, 10)), 5),
        "hi": round(float(np.percentile(signed, 90)), 5),
    }


def table_accuracy(index: Index) -> dict:
    errs = leave_one_out(index)
    return {k: summarize(v) for k, v in errs.items()}


def passes(stats: dict, target: tuple[float, float]) -> bool | None:
    """Whether the interpolated leave-one-out figures meet (median, p90) targets; None without data."""
    s = stats.get("interpolated", {})
    if not s.get("n"):
        return None
    return s["median"] <= target[0] and s["p90"] <= target[1]


def fmt_pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f} %"
