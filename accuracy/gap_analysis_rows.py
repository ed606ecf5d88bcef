"""A model's gap-analysis file of AIConfigurator's silicon_sample.csv (qwen3.5-397b-gap-analysis.csv,
kimi-k2.5-gap-analysis.csv) against InferenceX's own rows: how many of its development points carry the TTFT
and TPOT of InferenceX's row of the same deployment and load (to the file's two decimals), then, from two
priced development parts (accuracy/closed_loop.py --out), predicted / measured by model, system and rows.

    python accuracy/gap_analysis_rows.py --before before.json --after after.json

Held-out points are dropped before anything is read or compared."""

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from closed_loop import (
    DATA,
    SYSTEMS,
    WITHIN,
    describe,
    read_priced,
    ttft_pred,
)  # the sibling script (run from accuracy/)

from servelab.calibrate.closed_loop import Point, read_points

MODELS = ("qwen3.5-397b-a17b", "kimi-k2.5")
GAP_FILE = "gap-analysis.csv"


def rows_of(p: Point) -> str:
    return "gap-analysis file" if GAP_FILE in p.case.silicon_source else "InferenceX's own rows"


def deployment_and_load(p: Point) -> tuple:
    c = p.case
    return (c.system, c.engine, c.model.source, c.parallel, c.concurrency, c.isl, c.osl)


def measured(p: Point) -> tuple[float, float]:
    return (round(p.case.ttft_ms, 2), round(p.case.tpot_ms, 2))


def matches(dev: list[Point]) -> None:
    """Per gap-analysis file: its points with an InferenceX row of the same deployment and load, and how many
    of them carry that row's measured values."""
    theirs: dict[tuple, set] = defaultdict(set)
    for p in dev:
        if GAP_FILE not in p.case.silicon_source and p.source.startswith("inferencex"):
            theirs[deployment_and_load(p)].add(measured(p))
    for model in MODELS:
        gap = [p for p in dev if p.case.model.name == model and GAP_FILE in p.case.silicon_source]
        paired = [p for p in gap if deployment_and_load(p) in theirs]
        same = sum(measured(p) in theirs[deployment_and_load(p)] for p in paired)
        print(
            f"{model}: {len(gap)} points of its gap-analysis file, {len(paired)} with an InferenceX row "
            f"of the same deployment and load, {same} of those with its TTFT and TPOT to two decimals"
        )


def ratios(points: list[Point], priced: dict) -> tuple[np.ndarray, np.ndarray]:
    rs = [{**describe(p), **priced[p.key]} for p in points]
    t = np.array([ttft_pred(r) / r["ttft_ms"] for r in rs])
    d = np.array([r["tpot_p50"] / r["tpot_ms"] for r in rs])
    return t, d


def table(dev: list[Point], before: dict, after: dict) -> None:
    print()
    print("| model | system | rows | points | TTFT before | TTFT after | TPOT before | TPOT after |", end="")
    print(f" TTFT within {WITHIN}x before / after |")
    print("|---|---|---|---|---|---|---|---|---|")
    groups: dict[tuple, list[Point]] = defaultdict(list)
    for p in dev:
        if p.case.model.name in MODELS:
            groups[(p.case.model.name, p.case.system, rows_of(p))].append(p)
    for key in sorted(groups):
        ps = groups[key]
        cells, within = [], []
        for priced in (before, after):
            t, d = ratios(ps, priced)
            cells.append((t, d))
            within.append(f"{np.mean((t <= WITHIN) & (t >= 1 / WITHIN)):.0%}")

        def cell(a: np.ndarray) -> str:
            return f"{np.median(np.abs(a - 1)):.1%} ({np.median(a):.2f}x)"

        (tb, db), (ta, da) = cells
        print(
            f"| {' | '.join(key)} | {len(ps)} | {cell(tb)} | {cell(ta)} | {cell(db)} | {cell(da)} |", end=""
        )
        print(f" {within[0]} / {within[1]} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="a priced development part (--out)")
    ap.add_argument("--after", type=Path, required=True, help="the same, priced by the change")
    args = ap.parse_args(argv)
    before, after = read_priced(args.before), read_priced(args.after)
    if before is None or after is None:
        return 2
    points, _ = read_points(DATA, SYSTEMS)
    dev = [p for p in points if not p.heldout]
    missing = [p.key for p in dev if p.case.model.name in MODELS and not (p.key in before and p.key in after)]
    if missing:
        print(
            f"error: {len(missing)} development points are not priced in both files ({missing[0]}, ...)",
            file=sys.stderr,
        )
        return 2
    matches(dev)
    table(dev, before, after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
