"""The twin against public closed-loop benchmarks it never saw: each pinned point of tests/data/closed_loop
(calibrate/closed_loop.py reads them) priced as servelab prices it for a user (the shipped calibration, or
--calibration), replayed as its client ran it, compared by its median (and p99 where the source has one).

    python accuracy/closed_loop.py --part dev --out dev.json            # the development part
    python accuracy/closed_loop.py --part heldout --out heldout.json    # held out: the final figures only

Prices are cached in --out by point and a fingerprint of what priced it (the calibration file's SHA-256 and
servelab's git commit with its uncommitted changes of src/), so an interrupted run resumes. --jobs N prices
in N forked processes. Output: per part, by system, engine and family: points, TTFT and TPOT median
|pred / meas - 1|, the two together, the share of TTFTs within 1.5x, measured / predicted TTFT lowest and
highest, p99 TTFT where measured; then the worst TTFT points either way.
"""

import argparse
import hashlib
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from servelab.calibrate.closed_loop import Point, read_points
from servelab.calibrate.pool import Jobs, try_price_rows, workers_for
from servelab.calibrate.price import Pricer
from servelab.calibrate.rows import Case
from servelab.errors import ServelabError
from servelab.predict.engines import read_calibration, shipped_calibration
from servelab.specs import load_system

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "closed_loop"
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200")
FIELDS = ("ttft_p50", "tpot_p50", "ttft_p99", "tpot_p99", "ttft_mean")
TOKEN_POSITION = "inferencex-token-position"
WITHIN = 1.5  # the bound on a TTFT's ratio either way
WORST = 12  # worst TTFT points listed each way


def fingerprint(calibration: Path) -> str:
    """What priced a point: the calibration file and the code (commit plus uncommitted changes of src/)."""
    h = hashlib.sha256(calibration.read_bytes())
    for cmd in (["git", "rev-parse", "HEAD"], ["git", "diff", "HEAD", "--", "src"]):
        h.update(subprocess.run(cmd, cwd=ROOT, capture_output=True, check=False).stdout)
    return h.hexdigest()[:16]


class PointPricer:
    """A point's twin: TTFT and TPOT at p50 and p99, and the mean TTFT."""

    def __init__(self, calibration: Path):
        cal = read_calibration(calibration)
        self.params = {name: dict(entry.params) for name, entry in cal.engines.items()}
        self.moe_fits = cal.moe_fits()  # where the fitted MoE terms reach, as for a user
        self.pricers: dict[str, Pricer] = {}

    def __call__(self, case: Case, _params: dict[str, float]) -> tuple[float, ...]:
        pricer = self.pricers.get(case.system)
        if pricer is None:
            system = load_system(case.system)
            pricer = self.pricers[case.system] = Pricer(system, "aggregated", moe_fits=self.moe_fits)
        p = pricer.estimate(case, self.params.get(case.engine.value, {})).percentiles
        return (
            p["ttft_ms"]["p50"],
            p["tpot_ms"]["p50"],
            p["ttft_ms"]["p99"],
            p["tpot_ms"]["p99"],
            p["ttft_ms"]["mean"],
        )


def price_points(points: list[Point], calibration: Path, out: Path, jobs: int) -> dict:
    stamp = fingerprint(calibration)
    saved = json.loads(out.read_text()) if out.is_file() else {}
    if saved.get("fingerprint") != stamp:
        saved = {"fingerprint": stamp, "calibration": str(calibration), "points": {}}
    todo = [p for p in points if p.key not in saved["points"]]
    print(f"{len(points)} points, {len(todo)} to price ({stamp})", file=sys.stderr)
    price = PointPricer(calibration)
    chunk = 200  # written to --out after each chunk, so an interrupted run resumes
    for start in range(0, len(todo), chunk):
        part = todo[start : start + chunk]
        got = try_price_rows(
            [(p.case, {}) for p in part],
            price,  # type: ignore[arg-type]  # returns more than the (ttft, tpot) pair; pool passes it through
            Jobs(workers_for(jobs), lambda s: print(s, file=sys.stderr)),
            f"points {start + 1}-{start + len(part)} of {len(todo)}",
        )
        for point, priced in zip(part, got, strict=True):
            if isinstance(priced, ServelabError):
                saved["points"][point.key] = {"refused": str(priced)}
            else:
                saved["points"][point.key] = dict(zip(FIELDS, priced, strict=True))
        out.write_text(json.dumps(saved, indent=1, sort_keys=True))
    return saved


def describe(point: Point) -> dict:
    c = point.case
    return {
        "id": point.key,
        "heldout": point.heldout,
        "source": point.source,
        "system": c.system,
        "engine": c.engine.value,
        "family": c.family,
        "model": c.model.name,
        "parallel": c.parallel.label(),
        "isl": c.isl,
        "osl": c.osl,
        "concurrency": c.concurrency,
        "ttft_ms": c.ttft_ms,
        "tpot_ms": c.tpot_ms,
        "ttft_p99_ms": point.ttft_p99_ms,
    }


def read_priced(path: Path) -> dict | None:
    """The priced points of a `--out` file (by point key), or None with one line on stderr naming the file:
    what the sibling scripts reading a priced development part share."""
    try:
        return json.loads(path.read_text())["points"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: --priced {path}: expected accuracy/closed_loop.py's --out JSON ({e})", file=sys.stderr)
        return None


def ttft_pred(r: dict) -> float:
    """The predicted TTFT compared with a point's: the twin's median where the source says it measured one
    (InferenceX's token-position files), the twin's mean for a silicon_sample.csv row, whose statistic the
    file does not name: the mean is what servelab's calibration compares those rows with (calibrate/price.py
    returns the aggregated estimate's ttft_ms, the simulated mean)."""
    return r["ttft_p50"] if r["source"] == TOKEN_POSITION else r["ttft_mean"]


def ratios(g: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Predicted / measured TTFT and TPOT of each point."""
    t = np.array([ttft_pred(r) / r["ttft_ms"] for r in g])
    d = np.array([r["tpot_p50"] / r["tpot_ms"] for r in g])
    return t, d


def within(t: np.ndarray) -> float:
    return float(np.mean((t <= WITHIN) & (t >= 1 / WITHIN)))


def table(rows: list[dict], by: tuple[str, ...]) -> list[str]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[tuple(r[k] for k in by)].append(r)
        groups[("all",) * len(by)].append(r)
    out = [
        f"{' / '.join(by):40s} {'n':>5s} {'TTFT':>7s} {'TPOT':>7s} {'both':>7s} {'<=1.5x':>7s} "
        f"{'TTFT x':>14s} {'p99 TTFT':>9s}"
    ]
    for key in sorted(groups, key=lambda k: (k[0] != "all", k)):
        g = groups[key]
        t, d = ratios(g)
        both = np.concatenate([np.abs(t - 1), np.abs(d - 1)])
        p99 = [r["ttft_p99"] / r["ttft_p99_ms"] for r in g if r["ttft_p99_ms"]]
        p99s = f"{np.median(np.abs(np.array(p99) - 1)):9.1%}" if p99 else f"{'-':>9s}"
        worst = 1.0 / t  # measured / predicted
        out.append(
            f"{' / '.join(map(str, key)):40s} {len(g):5d} {np.median(np.abs(t - 1)):7.1%} "
            f"{np.median(np.abs(d - 1)):7.1%} {np.median(both):7.1%} {within(t):7.0%} "
            f"{worst.min():6.2f}-{worst.max():7.2f} {p99s}"
        )
    return out


def worst_points(rows: list[dict]) -> list[str]:
    """The TTFTs furthest off, each way (measured / predicted), with their deployment and load."""
    t, d = ratios(rows)
    order = np.argsort(t)  # predicted / measured, lowest first: the twin shortest first

    def line(i: int) -> str:
        r = rows[i]
        return (
            f"  {1 / t[i]:8.2f}x  {r['system']} {r['engine']} {r['model']} {r['parallel']} "
            f"{r['isl']}/{r['osl']} c{r['concurrency']}: TTFT {r['ttft_ms']:,.0f} ms measured, "
            f"{ttft_pred(r):,.0f} predicted; TPOT {r['tpot_ms']:.1f} / {r['tpot_p50']:.1f} ({r['id']})"
        )

    out = [f"worst TTFTs, predicted short (measured / predicted, the {WORST} highest):"]
    out += [line(i) for i in order[:WORST]]
    out.append(f"worst TTFTs, predicted long (the {WORST} lowest):")
    out += [line(i) for i in order[::-1][:WORST]]
    return out


def priced_rows(points: list[Point], saved: dict) -> tuple[list[dict], dict[str, int]]:
    rows: list[dict] = []
    refused: dict[str, int] = defaultdict(int)
    for p in points:
        got = saved["points"].get(p.key)
        if got is None:
            continue
        if "refused" in got:
            refused[got["refused"][:100]] += 1
            continue
        rows.append({**describe(p), **got})
    return rows, refused


def report(points: list[Point], saved: dict, part: str) -> None:
    rows, refused = priced_rows(points, saved)
    print(f"\n== {part}: {len(rows)} points priced, {sum(refused.values())} refused ({saved['fingerprint']})")
    for why, n in sorted(refused.items(), key=lambda kv: -kv[1]):
        print(f"   refused {n}: {why}")
    if not rows:
        return
    t, d = ratios(rows)
    worst = max(float(np.max(t)), float(np.max(1 / t)))
    print(
        f"TTFT and TPOT together: median |error| {np.median(np.abs(np.concatenate([t, d]) - 1)):.1%} "
        f"(TTFT {np.median(np.abs(t - 1)):.1%}, TPOT {np.median(np.abs(d - 1)):.1%}); TTFT off by "
        f"{worst:.2f}x at worst, within {WITHIN}x on {within(t):.0%} of the points; median predicted / "
        f"measured TTFT {np.median(t):.2f}"
    )
    print(
        "columns: median |pred / meas - 1| of TTFT, TPOT and both; <=1.5x: share of TTFTs within 1.5x either"
    )
    print("way; TTFT x: measured / predicted, lowest-highest; p99 TTFT: median |error| where measured")
    # by source and engine too: InferenceX's rows measured without a warm-up apart (calibrate/closed_loop.py)
    tables = (("system",), ("engine",), ("engine", "family"), ("system", "engine", "family"), ("source",))
    for by in (*tables, ("source", "engine", "family")):
        print()
        print("\n".join(table(rows, by)))
    print()
    print("\n".join(worst_points(rows)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--part", choices=("dev", "heldout", "both"), default="dev")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--calibration", type=Path, default=shipped_calibration())
    ap.add_argument("--out", type=Path, required=True, help="priced points (JSON; resumed)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--only", help="price only points whose id contains this text")
    ap.add_argument(
        "--skip-models",
        default="",
        help="leave out the points of these models (comma separated servelab names, e.g. qwen3.5-397b-a17b): "
        "a model that shares its family with older ones",
    )
    ap.add_argument(
        "--skip-families",
        default="",
        help="leave out the points of these model families (comma separated, e.g. kimi-k2.5,glm-5): the "
        "figures on the models an earlier pricing could price",
    )
    args = ap.parse_args(argv)
    t0 = time.time()
    try:
        points, skipped = read_points(args.data, tuple(args.systems.split(",")))
    except (OSError, ValueError, ServelabError) as e:
        what = "a folder of pinned closed-loop data (tests/data/closed_loop's layout)"
        print(f"error: --data {args.data}: expected {what} ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    want = {"dev": (False,), "heldout": (True,), "both": (False, True)}[args.part]
    skip = set(filter(None, args.skip_families.split(",")))
    skip_models = set(filter(None, args.skip_models.split(",")))
    points = [
        p
        for p in points
        if p.heldout in want
        and (not args.only or args.only in p.key)
        and p.case.family not in skip
        and p.case.model.name not in skip_models
    ]
    print(f"rows left out by reason: {dict(sorted(skipped.items(), key=lambda kv: -kv[1]))}", file=sys.stderr)
    saved = price_points(points, args.calibration, args.out, args.jobs)
    for flag, name in ((False, "development part"), (True, "held-out part")):
        if flag in want:
            report([p for p in points if p.heldout == flag], saved, name)
    print(f"{time.time() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
