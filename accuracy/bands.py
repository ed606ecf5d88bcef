"""Do servelab's prediction bands contain the measured value as often as they claim? (docs/accuracy.md
section 7, "bands that mean something")

    PYTHONPATH=src python accuracy/bands.py                                   # the calibration rows
    PYTHONPATH=src python accuracy/bands.py --dev /tmp/dev.json               # and the closed-loop dev part

The bands (servelab.predict.bands) are quantiles of the calibration's out-of-sample residuals
log(measured / predicted), per engine and metric, read from the residuals file beside the calibration
(predict/data/calibrated.residuals.json, written by `servelab calibrate engines`). Their coverage is counted
honestly, nested leave-one-family-out: for each model family the bands are built from the other families'
rows only (of every engine), and the family's rows are checked against them. Printed by engine, by family and
by engine/family against the claim, at the shipped claim and at others (a band that is right at 80 % by luck
is wrong at 50 % or 90 %); then the kernel-source band (the step model's low and high op times through the
simulation) as it was shown before, and whether its width says which predictions are worse (a band scaled by
it, coverage and width beside the plain one).

--dev FILE: the closed-loop development points (tests/data/closed_loop, not the held-out ones) priced by
`accuracy/closed_loop.py --part dev --out FILE`, checked against the bands built from every calibration row:
other systems, engines' versions and loads than the calibration's H200 rows, so out of distribution. TTFT is
the twin's median where the point measured one (its mean for silicon rows), as closed_loop.py compares it.
"""

import argparse
import json
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
from closed_loop import DATA, SYSTEMS, priced_rows, ttft_pred  # the sibling script (run from accuracy/)

from servelab.calibrate.closed_loop import read_points
from servelab.predict.bands import (
    CLAIM,
    METRICS,
    MIN_ROWS,
    WIDEN,
    Residual,
    band_for,
    build_bands,
    claimed_bands,
    coverage,
    read_residuals,
    residuals_path,
    share,
)
from servelab.predict.engines import shipped_calibration

CLAIMS = (0.5, CLAIM, 0.9)
Group = Callable[[Residual], str]
GROUPS: dict[str, Group] = {
    "engine": lambda r: r.engine,
    "family": lambda r: r.family,
    "engine/family": lambda r: f"{r.engine}/{r.family}",
}


def pct(x: float | np.floating) -> str:
    return f"{100 * x:5.1f}"


def coverage_table(checked: list[tuple[Residual, dict[str, bool]]], claim: float) -> list[str]:
    """Measured coverage (%) of TTFT and TPOT per group, against the claim."""
    out = [
        f"claim {share(claim)}: measured coverage (%), nested leave-one-family-out (the held-out family "
        "out of the residuals and of the choice of their central share)"
    ]
    out.append(f"  {'group':28s} {'n':>5s} {'TTFT':>6s} {'TPOT':>6s} {'both':>6s}")

    def line(name: str, rows: list[tuple[Residual, dict[str, bool]]]) -> str:
        t = np.mean([c["ttft"] for _, c in rows])
        d = np.mean([c["tpot"] for _, c in rows])
        return f"  {name:28s} {len(rows):5d} {pct(t):>6s} {pct(d):>6s} {pct((t + d) / 2):>6s}"

    out.append(line("all", checked))
    for title, key in GROUPS.items():
        groups: dict[str, list] = defaultdict(list)
        for r, c in checked:
            groups[key(r)].append((r, c))
        out.append(f"  -- by {title}")
        out += [line(name, rows) for name, rows in sorted(groups.items())]
    return out


def shipped_bands(rows: list[Residual]) -> list[str]:
    bands = claimed_bands(rows)
    out = [f"bands shipped ({share(CLAIM)} claim; from every row; measured / predicted - 1 at the ends):"]
    for (engine, metric), b in sorted(bands.items()):
        lo, hi = math.exp(b.low) - 1, math.exp(b.high) - 1
        out.append(f"  {engine:12s} {metric:5s} {100 * lo:+7.1f} % / {100 * hi:+7.1f} %   ({b.describe()})")
    return out


def kernel_band(doc: dict) -> list[str]:
    """The kernel-source band as shown before: how often it held the measured value, how wide it was, and
    whether its width goes with the size of the residual."""
    out = ["kernel-source band (the step model's low / high op times through the simulation), no claim:"]
    for metric in METRICS:
        inside, widths, sizes = [], [], []
        for row in doc["rows"]:
            lo, hi = row[f"kernel_band_{metric}_ms"]
            meas, pred = row[f"{metric}_ms"], row[f"pred_{metric}_ms"]
            inside.append(lo <= meas <= hi)
            widths.append(math.log(hi / lo) if lo > 0 else 0.0)
            sizes.append(abs(math.log(meas / pred)))
        w, s = np.array(widths), np.array(sizes)
        rho = spearman(w, s)
        order = np.argsort(w, kind="stable")  # the narrower and the wider half of the rows by width
        narrow, wide = s[order[: len(order) // 2]], s[order[len(order) // 2 :]]
        out.append(
            f"  {metric.upper()}: held the measured value on {100 * np.mean(inside):.0f} % of "
            f"{len(inside)} rows; "
            f"median width x{math.exp(np.median(w)):.2f}; Spearman(width, |residual|) {rho:+.2f}; median "
            f"|residual| on the wider half x{math.exp(np.median(wide)):.2f}, narrower half "
            f"x{math.exp(np.median(narrow)):.2f}"
        )
    return out


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def scaled_comparison(doc: dict, rows: list[Residual]) -> list[str]:
    """A band scaled by each prediction's kernel-source width (residual / width quantiles) beside the plain
    one: nested coverage at the claim and the median width of the band (x high / low)."""
    scaled, widths = [], []
    for row, r in zip(doc["rows"], rows, strict=True):
        w = {}
        for metric in METRICS:
            lo, hi = row[f"kernel_band_{metric}_ms"]
            w[metric] = max(math.log(hi / lo), 1e-3) if lo > 0 else 1e-3
        widths.append(w)
        scaled.append(Residual(r.engine, r.family, r.ttft / w["ttft"], r.tpot / w["tpot"]))
    out = [f"plain band vs band scaled by the kernel-source width (claim {share(CLAIM)}, nested LOFO):"]
    for name, data in (("plain", rows), ("scaled", scaled)):
        checked = coverage(data, CLAIM)
        cells = []
        for metric in METRICS:
            cov = np.mean([c[metric] for _, c in checked])
            width = []
            for family in sorted({r.family for r in data}):
                bands = build_bands([r for r in data if r.family != family])
                for i, r in enumerate(data):
                    if r.family == family:
                        b = band_for(bands, r.engine, metric)
                        if b is not None:
                            k = widths[i][metric] if name == "scaled" else 1.0
                            width.append((b.high - b.low) * k)
            cells.append(f"{metric.upper()} {pct(cov)} % wide x{math.exp(np.median(width)):.2f}")
        out.append(f"  {name:7s} " + "; ".join(cells))
    return out


def dev_points(priced: Path) -> list[dict]:
    """The closed-loop development points priced in `priced` (accuracy/closed_loop.py --out)."""
    points, _ = read_points(DATA, SYSTEMS)
    dev = [p for p in points if not p.heldout]  # the held-out part is never read here
    rows, _ = priced_rows(dev, json.loads(priced.read_text()))
    return rows


def dev_coverage(priced: Path, rows: list[Residual]) -> list[str]:
    bands = claimed_bands(rows)
    points = dev_points(priced)
    out = [
        f"closed-loop development points ({len(points)} priced; out of distribution: other systems, "
        f"versions and loads than the H200 calibration rows), claim {share(CLAIM)}:",
        f"  {'group':36s} {'n':>5s} {'TTFT':>6s} {'TPOT':>6s} {'below':>6s} {'above':>6s}",
    ]
    groups: dict[str, list[tuple[bool, bool, int]]] = defaultdict(list)
    for p in points:
        got = []
        side = 0
        for metric, pred in (("ttft", ttft_pred(p)), ("tpot", p["tpot_p50"])):
            b = band_for(bands, p["engine"], metric)
            r = math.log(p[f"{metric}_ms"] / pred)
            got.append(b is not None and b.contains(r))
            if b is not None and metric == "ttft":
                side = -1 if r < b.low else (1 if r > b.high else 0)
        keys = (p["system"], p["engine"], f"{p['system']}/{p['engine']}", f"{p['engine']}/{p['family']}")
        for key in ("all", *keys):
            groups[key].append((got[0], got[1], side))
    for key in ["all", *sorted(k for k in groups if k != "all")]:
        g = groups[key]
        t, d = np.mean([x[0] for x in g]), np.mean([x[1] for x in g])
        below, above = np.mean([x[2] < 0 for x in g]), np.mean([x[2] > 0 for x in g])
        out.append(f"  {key:36s} {len(g):5d} {pct(t):>6s} {pct(d):>6s} {pct(below):>6s} {pct(above):>6s}")
    out.append("  (below / above: share of TTFTs measured under / over the band)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--residuals", type=Path, default=residuals_path(shipped_calibration()))
    ap.add_argument("--dev", type=Path, help="closed-loop dev points priced by accuracy/closed_loop.py --out")
    args = ap.parse_args(argv)
    rows = read_residuals(args.residuals)
    doc = json.loads(args.residuals.read_text())
    engines = ", ".join(f"{e} {sum(r.engine == e for r in rows)}" for e in sorted({r.engine for r in rows}))
    print(f"{args.residuals}: {len(rows)} rows ({engines}); {doc.get('_provenance', '')}")
    print(f"engines with fewer than {MIN_ROWS} rows take every engine's residuals (pooled)\n")
    print("\n".join(shipped_bands(rows)))
    for claim in CLAIMS:
        print()
        print("\n".join(coverage_table(coverage(rows, claim, level=WIDEN), claim)))
    print()
    print(f"the same without widening (each band at its claim's own quantiles), claim {share(CLAIM)}:")
    plain = coverage_table(coverage(rows, CLAIM), CLAIM)
    print("\n".join(plain[1 : plain.index("  -- by family")]))
    print()
    print("\n".join(kernel_band(doc)))
    print()
    print("\n".join(scaled_comparison(doc, rows)))
    if args.dev:
        print()
        print("\n".join(dev_coverage(args.dev, rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
