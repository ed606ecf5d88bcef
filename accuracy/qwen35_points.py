"""Qwen3.5-397B-A17B's development points by group: predicted / measured TTFT and TPOT (median and range) by
system, release, lengths and client, from a priced development part (accuracy/closed_loop.py --out).

    python accuracy/qwen35_points.py --priced dev.json

Held-out points are dropped before anything is read from the priced file."""

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from closed_loop import (
    DATA,
    SYSTEMS,
    describe,
    read_priced,
    ttft_pred,
)  # the sibling script (run from accuracy/)

from servelab.calibrate.closed_loop import read_points

MODEL = "qwen3.5-397b-a17b"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--priced", type=Path, required=True, help="accuracy/closed_loop.py's --out of --part dev"
    )
    args = ap.parse_args(argv)
    priced = read_priced(args.priced)
    if priced is None:
        return 2
    points, _ = read_points(DATA, SYSTEMS)
    groups: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for p in points:
        if p.heldout or p.case.model.name != MODEL:
            continue
        got = priced.get(p.key)
        if got is None or "refused" in got:
            continue
        r = {**describe(p), **got}
        key = (p.case.system, p.case.model.source, f"{p.case.isl}/{p.case.osl}", p.source)
        groups[key].append((ttft_pred(r) / r["ttft_ms"], r["tpot_p50"] / r["tpot_ms"]))
    print("| system | release | ISL/OSL | client | points | TTFT pred / meas | TPOT pred / meas |")
    print("|---|---|---|---|---|---|---|")
    for key in sorted(groups):
        t, d = (np.array(x) for x in zip(*groups[key], strict=True))
        cells = [f"{np.median(a):.2f} ({a.min():.2f}-{a.max():.2f})" for a in (t, d)]
        print(f"| {' | '.join(key)} | {len(t)} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
