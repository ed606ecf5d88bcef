"""Where the aggregated twin's TPOT goes under load: its decode steps, or the steps carrying prefill that
stall them. For the development points of one engine (tests/data/closed_loop, part == dev; a held-out point
is never read), each replayed as accuracy/closed_loop.py replays it: the measured TPOT and TTFT beside the
twin's median TPOT, its median gap between tokens (ITL: one decode step, prefill steps in between excluded),
the share of the run spent in steps that carry prefill, and its TTFT. `--what-if NAME=VALUE` prices every
point again with one of the engine's calibrated parameters set to VALUE (a probe: it writes nothing and
changes no default).

    python accuracy/prefill_stall.py --engine sglang --systems b200_sxm,b300_sxm [--isl 1024 --osl 1024] \\
        [--only TEXT] [--what-if eager_moe_route_us=0] [--json rows.json]

Output: a line per point (system, layout, lengths, concurrency), then predicted / measured TPOT and TTFT by
concurrency (medians), as shipped and with the what-if; --json writes the rows (the point's settings and
measurements, and the twin's split under "shipped" and "what_if").
"""

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from closed_loop import DATA, SYSTEMS, describe

from servelab.calibrate.closed_loop import Point, read_points
from servelab.calibrate.price import Pricer
from servelab.calibrate.rows import Case
from servelab.errors import ServelabError
from servelab.predict.engines import FITTED, read_calibration, shipped_calibration
from servelab.specs import load_system


def what_if(text: str | None) -> tuple[str, float] | None:
    """NAME=VALUE as (name, value); a ServelabError naming --what-if unless NAME is a fitted parameter and
    VALUE a number >= 0."""
    if text is None:
        return None
    name, _, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if name not in FITTED or number < 0:
        raise ServelabError(
            f"--what-if: expected NAME=VALUE, NAME one of {', '.join(FITTED)} and VALUE >= 0, got {text!r}",
            field="what-if",
        )
    return name, number


class TwinSplit:
    """The twin's answer for a point, split: median TPOT, median ITL, prefill share of the run, mean and
    median TTFT (ms)."""

    def __init__(self, params: dict[str, float]):
        self.params = params
        self.pricers: dict[str, Pricer] = {}

    def __call__(self, case: Case) -> dict[str, float]:
        pricer = self.pricers.get(case.system)
        if pricer is None:
            pricer = self.pricers[case.system] = Pricer(load_system(case.system), "aggregated")
        est = pricer.estimate(case, self.params)
        p = est.percentiles
        return {
            "tpot": p["tpot_ms"]["p50"],
            "itl": p["itl_ms"]["p50"],
            "prefill_share": est.scheduler["time_in_prefill_steps"],
            "ttft_mean": p["ttft_ms"]["mean"],
            "ttft_p50": p["ttft_ms"]["p50"],
        }


def development_points(engine: str, systems: tuple[str, ...], args: argparse.Namespace) -> list[Point]:
    """The development points of `engine` on `systems` with the lengths and id text asked for."""
    points, _ = read_points(DATA, systems)
    return [
        p
        for p in points
        if not p.heldout
        and p.case.engine.value == engine
        and (args.isl is None or p.case.isl == args.isl)
        and (args.osl is None or p.case.osl == args.osl)
        and (not args.only or args.only in p.key)
    ]


def point_line(row: dict, got: dict, alt: dict | None) -> str:
    line = (
        f"{row['system']:9s} {row['parallel']:8s} {row['isl']}/{row['osl']:<5d} c{row['concurrency']:<4d} "
        f"TPOT {row['tpot_ms']:6.1f} meas, twin {got['tpot']:6.1f} = ITL {got['itl']:5.1f} with "
        f"{got['prefill_share']:4.0%} in prefill steps; TTFT {row['ttft_ms']:7,.0f} meas, "
        f"twin {got['ttft_mean']:7,.0f}"
    )
    if alt is not None:
        line += (
            f" | what-if TPOT {alt['tpot']:6.1f} ({alt['prefill_share']:4.0%}), TTFT {alt['ttft_mean']:7,.0f}"
        )
    return line


def by_concurrency(rows: list[dict], key: str) -> str:
    """Median predicted / measured TPOT and TTFT (the twin's mean, as closed_loop.py compares silicon rows) by
    concurrency, for the answers under `key`."""
    groups: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r["concurrency"]].append(r)
    parts = []
    for c in sorted(groups):
        g = groups[c]
        tpot = np.median([r[key]["tpot"] / r["tpot_ms"] for r in g])
        ttft = np.median([r[key]["ttft_mean"] / r["ttft_ms"] for r in g])
        parts.append(f"c{c} ({len(g)}): TPOT {tpot:.2f}, TTFT {ttft:.2f}")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--engine", default="sglang")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--isl", type=int)
    ap.add_argument("--osl", type=int)
    ap.add_argument("--calibration", type=Path, default=shipped_calibration())
    ap.add_argument("--only", help="only points whose id contains this text")
    ap.add_argument("--what-if", help="NAME=VALUE: one calibrated parameter of the engine set to VALUE")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    try:
        change = what_if(args.what_if)
        engines = read_calibration(args.calibration).engines
        if args.engine not in engines:
            raise ServelabError(
                f"--engine: expected one the calibration fits ({', '.join(sorted(engines))}), "
                f"got {args.engine!r}",
                field="engine",
            )
        params = dict(engines[args.engine].params)
        points = development_points(args.engine, tuple(args.systems.split(",")), args)
    except ServelabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    shipped = TwinSplit(params)
    probe = TwinSplit({**params, change[0]: change[1]}) if change else None
    rows = []
    for p in sorted(points, key=lambda p: (p.case.system, p.case.parallel.label(), p.case.isl, p.case.osl)):
        try:
            row = {**describe(p), "shipped": shipped(p.case), "what_if": probe(p.case) if probe else None}
        except ServelabError as e:
            print(f"refused {p.key}: {e}", file=sys.stderr)
            continue
        rows.append(row)
        print(point_line(row, row["shipped"], row["what_if"]))
    print(f"\n{len(rows)} development points, {args.engine}; predicted / measured by concurrency (medians)")
    print(f"shipped: {by_concurrency(rows, 'shipped')}")
    if change:
        print(f"{change[0]}={change[1]:g}: {by_concurrency(rows, 'what_if')}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
