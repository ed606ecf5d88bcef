"""The twin against the fresh public closed-loop results (tests/data/closed_loop_fresh): each point replayed
as its client ran it (calibrate.closed_loop_fresh) and priced as servelab prices it for a user
(calibrate.closed_loop_fresh_price), compared with its measurement at the statistic the replay states
(median for the aggregated together_runner points, mean for the disaggregated MI355X points).

    python accuracy/closed_loop_fresh.py --part dev --out dev.json           # the development part
    python accuracy/closed_loop_fresh.py --part heldout --out heldout.json   # held out: once, at the end
    python accuracy/closed_loop_fresh.py --part heldout --settings-only      # priceable? reads no result

Output per part: median |pred / meas - 1| of TTFT and TPOT together and each, the share of TTFTs within 1.5x,
the share of measurements inside the band each estimate states, and the p99 TTFT's median |error| where the
estimate has a p99 (the aggregated twin); by deployment group; then every point.
`--settings-only` prices the part's replays and says which it refuses, reading and printing no measurement
and no prediction. `--what-if-max-num-seqs N` (development part only) is a probe that writes nothing: the
replays whose run left the engine's sequence limit at its default run with N instead.
"""

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
from closed_loop import WITHIN

from servelab.calibrate.closed_loop_fresh import FreshReplay, read_measured, read_replays
from servelab.calibrate.closed_loop_fresh_price import price
from servelab.errors import ServelabError
from servelab.predict.engines import shipped_calibration

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "closed_loop_fresh"
# checkpoints servelab does not embed: their config.json, pinned beside the older closed-loop data
CONFIGS = {"minimaxai/minimax-m2.5": ROOT / "tests/data/closed_loop/aiconfigurator/minimax-m2.5/config.json"}


def group_name(r: FreshReplay) -> str:
    layout = r.parallel.label() if r.parallel else r.split.label() if r.split else "?"
    return f"{r.system} {r.engine.value} {r.model.name} {r.mode} {layout}"


def price_part(replays: list[FreshReplay], calibration: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """Every replay's estimate, and the refused ones' reasons, by row id."""
    priced, refused = {}, {}
    for r in replays:
        try:
            priced[r.row_id] = price(r, calibration)
        except ServelabError as e:
            refused[r.row_id] = str(e)
    return priced, refused


def inside(value: float, band: list[float] | tuple[float, float] | None) -> bool | None:
    return None if band is None else band[0] <= value <= band[1]


def summary(rows: list[dict]) -> str:
    t = np.array([r["ttft_ratio"] for r in rows])
    d = np.array([r["tpot_ratio"] for r in rows])
    both = np.concatenate([np.abs(t - 1), np.abs(d - 1)])
    within = np.mean((t <= WITHIN) & (t >= 1 / WITHIN))
    cover = []
    for name in ("ttft", "tpot"):
        hits = [r[f"{name}_in_band"] for r in rows if r[f"{name}_in_band"] is not None]
        cover.append(f"{np.mean(hits):4.0%} of {len(hits)}" if hits else "no band")
    # the TTFT distribution's tail where the estimate states one (the aggregated twin's p99)
    tail = [abs(r["ttft_p99_ratio"] - 1) for r in rows if r["ttft_p99_ratio"] is not None]
    p99 = f"{np.median(tail):6.1%} of {len(tail)}" if tail else "not estimated"
    return (
        f"{len(rows):3d} points: both {np.median(both):6.1%}  TTFT {np.median(np.abs(t - 1)):6.1%}  "
        f"TPOT {np.median(np.abs(d - 1)):6.1%}  TTFT within {WITHIN}x {within:4.0%}  "
        f"pred/meas TTFT {np.median(t):5.2f} TPOT {np.median(d):5.2f}  "
        f"in band: TTFT {cover[0]}, TPOT {cover[1]}  p99 TTFT {p99}"
    )


def compare(replays: list[FreshReplay], priced: dict[str, dict], measured: dict) -> list[dict]:
    rows = []
    for r in replays:
        if r.row_id not in priced:
            continue
        p, m = priced[r.row_id], measured[r.row_id]
        rows.append(
            {
                "id": r.row_id,
                "group": group_name(r),
                "concurrency": r.concurrency,
                "statistic": r.statistic,
                "measured": {"ttft_ms": m.ttft_ms, "tpot_ms": m.tpot_ms, "ttft_p99_ms": m.ttft_p99_ms},
                "predicted": {k: v for k, v in p.items() if k != "estimate"},
                "ttft_ratio": p["ttft_ms"] / m.ttft_ms,
                "tpot_ratio": p["tpot_ms"] / m.tpot_ms,
                "ttft_p99_ratio": p["ttft_p99_ms"] / m.ttft_p99_ms if p["ttft_p99_ms"] else None,
                "ttft_in_band": inside(m.ttft_ms, p["ttft_band"]),
                "tpot_in_band": inside(m.tpot_ms, p["tpot_band"]),
            }
        )
    return rows


def band_text(band: list[float] | tuple[float, float] | None, nominal: float) -> str:
    if band is None:
        return "no band"
    return f"{band[0] / nominal - 1:+.0%}/{band[1] / nominal - 1:+.0%}"


def report(rows: list[dict], refused: dict[str, str], part: str) -> None:
    print(f"== {part}: {len(rows)} points priced, {len(refused)} refused")
    for rid, why in refused.items():
        print(f"   refused {rid}: {why}")
    if not rows:
        return
    print(f"all    {summary(rows)}")
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r["group"]].append(r)
    for name, g in sorted(groups.items()):
        print(f"\n{name} ({g[0]['statistic']} compared)\n       {summary(g)}")
        for r in sorted(g, key=lambda r: r["concurrency"]):
            m, p = r["measured"], r["predicted"]
            print(
                f"  c{r['concurrency']:<4d} TTFT {m['ttft_ms']:8.1f} meas {p['ttft_ms']:8.1f} pred "
                f"(x{r['ttft_ratio']:5.2f}, band {band_text(p['ttft_band'], p['ttft_ms'])}, "
                f"{'in' if r['ttft_in_band'] else 'out'})  TPOT {m['tpot_ms']:6.2f} meas {p['tpot_ms']:6.2f} "
                f"pred (x{r['tpot_ratio']:4.2f}, band {band_text(p['tpot_band'], p['tpot_ms'])}, "
                f"{'in' if r['tpot_in_band'] else 'out'})"
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--part", choices=("dev", "heldout"), default="dev")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--calibration", type=Path, default=shipped_calibration())
    ap.add_argument("--out", type=Path, help="write the comparison here (JSON)")
    ap.add_argument(
        "--settings-only",
        action="store_true",
        help="price the part's settings and list refusals; no measurement is read, no prediction printed",
    )
    ap.add_argument(
        "--what-if-max-num-seqs",
        type=int,
        help="probe (development part only): this sequence limit where the run left the engine's default",
    )
    args = ap.parse_args(argv)
    t0 = time.time()
    heldout = args.part == "heldout"
    if heldout and args.what_if_max_num_seqs:
        ap.error("--what-if-max-num-seqs: a probe of the development part only")
    replays = [r for r in read_replays(args.data, CONFIGS) if r.heldout == heldout]
    if args.what_if_max_num_seqs:
        replays = [
            r
            if r.settings.max_num_seqs
            else replace(r, settings=replace(r.settings, max_num_seqs=args.what_if_max_num_seqs))
            for r in replays
        ]
    priced, refused = price_part(replays, args.calibration)
    if args.settings_only:
        print(f"{args.part}: {len(replays)} replays, {len(priced)} priceable, {len(refused)} refused")
        for rid, why in refused.items():
            print(f"   refused {rid}: {why}")
        return 1 if refused else 0
    rows = compare(replays, priced, read_measured(args.data, heldout=heldout))
    report(rows, refused, {"dev": "development part", "heldout": "held-out part"}[args.part])
    if args.out:
        out = {"part": args.part, "calibration": str(args.calibration), "points": rows, "refused": refused}
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{time.time() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
