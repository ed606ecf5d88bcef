"""Collectives for GPU counts the campaign did not have, modelled from what it measured plus the link figures.

For each op and message size, the largest measured group (m GPUs) gives the bus bandwidth it reached at large
messages and, per size, the fixed cost left after the bandwidth term. The modelled latency is
latency(n) = fixed(n) + moved(n, bytes) / busbw_measured, moved(n, bytes) being the bytes each rank moves in a
ring algorithm (on an NVSwitch node the per-GPU bus bandwidth stays about constant with n). fixed(n) is
extended linearly in n through the two largest measured groups (NCCL's small-message latency grew 14 -> 18 us
from 2 to 4 H200s, far less than a ring's step count would say); with one measured group, by the ring's (n -
1) / (m - 1). Rows say source="modelled" and name what they came from.
"""

import math

from servelab.perfdb.ops import OpName


def _moved(op: str, n: int, nbytes: int) -> float:
    if op == OpName.allreduce:
        return 2.0 * (n - 1) / n * nbytes
    if op == OpName.p2p:
        return float(nbytes)
    return (n - 1) / n * nbytes


def model_rows(rows: list[dict], target_gpus: tuple[int, ...], system) -> list[dict]:
    """Rows for each (op, bytes) measured at the largest group size m, at every n in target_gpus above m that
    fits one NVLink domain."""
    by_op: dict[str, dict[int, list[dict]]] = {}
    for r in rows:
        if r.get("source", "measured") == "measured" and "gpus" in r:
            by_op.setdefault(r["op"], {}).setdefault(r["gpus"], []).append(r)
    out = []
    for op, by_gpus in by_op.items():
        if op == OpName.p2p:
            continue  # a point-to-point message does not depend on the group size
        m = max(by_gpus)
        measured = sorted(by_gpus[m], key=lambda r: r["bytes"])
        smaller = sorted(g for g in by_gpus if g < m)
        lower = {r["bytes"]: r for r in by_gpus[smaller[-1]]} if smaller else {}
        if len(measured) < 4:
            continue
        small = measured[0]["latency_us"]
        big = [r for r in measured if r["bytes"] >= (64 << 20)] or measured[-3:]
        busbw = sorted(
            _moved(op, m, r["bytes"]) / ((r["latency_us"] - small) * 1e-6)
            for r in big
            if r["latency_us"] > small
        )
        if not busbw:
            continue
        bw = busbw[len(busbw) // 2]
        for n in target_gpus:
            if n <= m or n > system.nvlink_domain:
                continue
            for r in measured:
                # per-size fixed part: what the measured size spent beyond its bandwidth term
                fixed_m = max(r["latency_us"] - _moved(op, m, r["bytes"]) / bw * 1e6, small * 0.5)
                low = lower.get(r["bytes"])
                if low is not None:
                    g = smaller[-1]
                    fixed_g = max(low["latency_us"] - _moved(op, g, r["bytes"]) / bw * 1e6, small * 0.5)
                    base = fixed_m + max(fixed_m - fixed_g, 0.0) / (m - g) * (n - m)
                    how = f"fixed cost linear in n through {g} and {m} GPUs"
                else:
                    base = fixed_m * (n - 1) / (m - 1)
                    how = "fixed cost x (n-1)/(m-1)"
                us = base + _moved(op, n, r["bytes"]) / bw * 1e6
                spread_lo = r["p10_us"] / r["latency_us"]
                spread_hi = r["p90_us"] / r["latency_us"]
                out.append(
                    {
                        "bytes": r["bytes"],
                        "gpus": n,
                        "op": op,
                        "latency_us": round(us, 3),
                        "p10_us": round(us * spread_lo, 3),
                        "p90_us": round(us * spread_hi, 3),
                        "reps": 0,
                        "source": "modelled",
                        "backend": "nccl",
                        "modelled_from": f"{op} measured on {m} GPUs at {r['bytes']} B; bus bandwidth "
                        f"{bw / 1e9:.0f} GB/s (median over >= 64 MiB); {how}",
                    }
                )
    return [r for r in out if math.isfinite(r["latency_us"])]
