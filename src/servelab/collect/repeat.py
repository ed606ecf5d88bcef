"""Repeatability: the same keys measured by two campaigns, compared row by row (median vs median); what
`servelab db compare-repeat FIRST SECOND` prints: the spread of (second / first - 1) per op and overall."""

import statistics
from pathlib import Path

from servelab.collect.campaign_dir import CampaignDir, key_from_row, key_id


def compare(first: Path, second: Path) -> dict:
    a = {
        key_id(key_from_row(r)): r
        for r in CampaignDir(first).rows()
        if r.get("source", "measured") == "measured"
    }
    out: dict[str, list[float]] = {}
    for r in CampaignDir(second).rows():
        k = key_id(key_from_row(r))
        if k in a and r.get("source", "measured") == "measured":
            out.setdefault(r["op"], []).append(r["latency_us"] / a[k]["latency_us"] - 1.0)
    every = [d for ds in out.values() for d in ds]
    return {"per_op": {op: _stats(ds) for op, ds in sorted(out.items())}, "all": _stats(every)}


def _stats(ds: list[float]) -> dict:
    if not ds:
        return {"n": 0}
    s = sorted(ds)

    def q(p):
        return s[min(len(s) - 1, round(p * (len(s) - 1)))]

    return {
        "n": len(s),
        "median_pct": round(100 * statistics.median(s), 2),
        "p5_pct": round(100 * q(0.05), 2),
        "p95_pct": round(100 * q(0.95), 2),
        "abs_median_pct": round(100 * statistics.median(abs(d) for d in s), 2),
        "within_5pct": round(sum(abs(d) <= 0.05 for d in s) / len(s), 3),
    }
