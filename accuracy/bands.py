"""Do servelab's prediction bands contain the measured value as often as they claim? (docs/accuracy.md
section 7, "bands that mean something" and "bands per engine, and out of distribution")

    PYTHONPATH=src python accuracy/bands.py                                   # the calibration rows
    PYTHONPATH=src python accuracy/bands.py --dev /tmp/dev.json               # and the closed-loop dev part

The bands (servelab.predict.bands) are quantiles of the calibration's out-of-sample residuals log(measured /
predicted), per engine and metric, read from the residuals file beside the calibration
(predict/data/calibrated.residuals.json, written by `servelab calibrate engines`). Their coverage is counted
honestly, nested leave-one-family-out: for each model family the bands are built from the other families' rows
only (of every engine), each engine's widening (unseen_family: its groups' offsets and spreads) taken from
those rows as well, and the family's rows are checked against them. Printed by engine, by family and by
engine/family against the claim, at the shipped claim and at others (a band that is right at 80 % by luck is
wrong at 50 % or 90 %); then bands narrowed to rows like the one predicted (dense or MoE, concurrency,
lengths, TP: each engine's rows of the same kind where it has MIN_ROWS of them), counted the same way; then
the kernel-source band (the step model's low and high op times through the simulation) as it was shown before,
and whether its width says which predictions are worse (a band scaled by it, coverage and width beside the
plain one).

--dev FILE: the closed-loop development points (tests/data/closed_loop, not the held-out ones) priced by
`accuracy/closed_loop.py --part dev --out FILE`, checked against the bands built from every calibration row:
which of them the bands claim (a point outside the residual rows, predict.band_domain.Domain, claims none),
how often the claimed ones and all of them (as if claimed) are covered; then bands widened from the
development points' own residuals, counted leaving one GPU kind and one source out at a time. TTFT is the
twin's median where the point measured one (its mean for silicon rows), as closed_loop.py compares it.

Bad input (a residuals or priced file that is missing or not what is expected): one line, exit 2.
"""

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
from closed_loop import DATA, SYSTEMS, priced_rows, ttft_pred  # the sibling script (run from accuracy/)

from servelab.calibrate.closed_loop import read_points
from servelab.errors import ServelabError
from servelab.predict.band_domain import Asked
from servelab.predict.bands import (
    CLAIM,
    METRICS,
    MIN_ROWS,
    Residual,
    band_for,
    build_bands,
    claimed_bands,
    coverage,
    quantiles,
    read_residuals,
    residuals_path,
    share,
)
from servelab.predict.engines import shipped_calibration
from servelab.specs import load_model

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
        "out of the residuals and of the offsets that widen them)"
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
        checked = coverage(data, CLAIM, widen=False)
        cells = []
        for metric in METRICS:
            cov = np.mean([c[metric] for _, c in checked])
            width = []
            for family in sorted({r.family for r in data}):
                bands = build_bands([r for r in data if r.family != family], widen=False)
                for i, r in enumerate(data):
                    if r.family == family:
                        b = band_for(bands, r.engine, metric)
                        if b is not None:
                            k = widths[i][metric] if name == "scaled" else 1.0
                            width.append((b.high - b.low) * k)
            cells.append(f"{metric.upper()} {pct(cov)} % wide x{math.exp(np.median(width)):.2f}")
        out.append(f"  {name:7s} " + "; ".join(cells))
    return out


@cache
def is_moe(model: str) -> bool:
    return load_model(model).is_moe


# rows like the one predicted: a feature the prediction knows, as a function of a residuals-file row
FEATURES: dict[str, Callable[[dict], object]] = {
    "dense or MoE": lambda row: is_moe(row["model"]),
    "concurrency >= 32": lambda row: row["concurrency"] >= 32,
    "concurrency >= 64": lambda row: row["concurrency"] >= 64,
    "ISL >= 4,000": lambda row: row["isl"] >= 4000,
    "OSL <= 500": lambda row: row["osl"] <= 500,
    "OSL <= 1,000": lambda row: row["osl"] <= 1000,
    "TP": lambda row: row["parallel"].split("-")[0],
    "EP or not": lambda row: "-ep" in row["parallel"],
}


def conditioned(rows: list[Residual], kinds: list[object]) -> list[tuple[Residual, dict[str, bool]]]:
    """Nested leave-one-family-out coverage of bands narrowed to rows like the one predicted: each engine's
    rows of the same kind (kinds[i]: row i's), where the other families have MIN_ROWS of them, each with its
    own widening as the product widens an engine's; the engine's band otherwise."""
    out = []
    kind_of = {id(r): k for r, k in zip(rows, kinds, strict=True)}
    for family in sorted({r.family for r in rows}):
        train = [r for r in rows if r.family != family]
        plain = build_bands(train)
        alike: dict[tuple[str, object], list[Residual]] = defaultdict(list)
        for r in train:
            alike[(r.engine, kind_of[id(r)])].append(r)
        narrow = {key: build_bands(g, min_rows=1) for key, g in alike.items() if len(g) >= MIN_ROWS}
        for r in (r for r in rows if r.family == family):
            bands = narrow.get((r.engine, kind_of[id(r)]), plain)
            inside = {}
            for metric in METRICS:
                band = band_for(bands, r.engine, metric)
                if band is not None:
                    inside[metric] = band.contains(r.of(metric))
            out.append((r, inside))
    return out


def conditioned_table(doc: dict, rows: list[Residual]) -> list[str]:
    """Coverage of each narrowed band beside the engine's, at the claim: a feature whose effect holds on
    families left out covers as claimed, and more evenly across engines."""
    out = [
        f"bands narrowed to rows like the predicted one (claim {share(CLAIM)}, nested LOFO; each engine's "
        f"rows of the same kind where there are {MIN_ROWS}, else the engine's):",
        f"  {'rows like':20s} {'all':>11s} {'sglang':>11s} {'trtllm':>11s} {'vllm':>11s} {'vllm/llama':>11s}",
    ]

    def cells(checked: list[tuple[Residual, dict[str, bool]]]) -> str:
        out = []
        for keep in (
            lambda r: True,
            lambda r: r.engine == "sglang",
            lambda r: r.engine == "trtllm",
            lambda r: r.engine == "vllm",
            lambda r: r.engine == "vllm" and r.family == "llama",
        ):
            got = [c for r, c in checked if keep(r)]
            t, d = (100 * np.mean([c[m] for c in got]) for m in METRICS)
            out.append(f"{t:5.1f}/{d:5.1f}")
        return " ".join(out)

    out.append(f"  {'(the engine: shipped)':20s} {cells(coverage(rows, CLAIM))}")
    for name, feature in FEATURES.items():
        kinds = [feature(row) for row in doc["rows"]]
        out.append(f"  {name:20s} {cells(conditioned(rows, kinds))}")
    out.append("  (TTFT/TPOT coverage, %)")
    return out


def seen_family(doc: dict, rows: list[Residual]) -> list[str]:
    """Bands for a family the engine's rows have (the only kind the product claims), held out by parallel
    layout: each engine/family with MIN_ROWS rows, one layout's rows left out of everything, checked against
    the family's own quantiles at the claim (an engine x family band) and against the engine's band built as
    shipped from every other row."""
    layout = [row["parallel"] for row in doc["rows"]]
    out = [
        f"a family the rows have, one parallel layout held out (engine/family with {MIN_ROWS} rows): "
        "coverage (%) of the family's own quantiles | of the engine's band as shipped, TTFT/TPOT"
    ]
    for claim in CLAIMS:
        cells = []
        for engine, family in sorted({(r.engine, r.family) for r in rows}):
            mine = [i for i, r in enumerate(rows) if (r.engine, r.family) == (engine, family)]
            if len(mine) < MIN_ROWS:
                continue
            own: dict[str, list[bool]] = defaultdict(list)
            shipped: dict[str, list[bool]] = defaultdict(list)
            for held in sorted({layout[i] for i in mine}):
                out_of = {i for i in mine if layout[i] == held}
                rest = [rows[i] for i in mine if i not in out_of]
                bands = build_bands([r for i, r in enumerate(rows) if i not in out_of], claim)
                for metric in METRICS:
                    low, high = quantiles([r.of(metric) for r in rest], claim) if rest else (0.0, 0.0)
                    own[metric] += [bool(rest) and low <= rows[i].of(metric) <= high for i in out_of]
                    shipped[metric] += [bands[(engine, metric)].contains(rows[i].of(metric)) for i in out_of]
            cells.append(
                f"{engine}/{family} ({len(mine)}) "
                + " | ".join(
                    "/".join(pct(np.mean(got[m])).strip() for m in METRICS) for got in (own, shipped)
                )
            )
        out.append(f"  {share(claim)}: " + "; ".join(cells))
    return out


def read_priced(priced: Path) -> dict:
    try:
        saved = json.loads(priced.read_text())
    except (OSError, ValueError) as e:
        raise ServelabError(
            f"--dev {priced}: expected the JSON accuracy/closed_loop.py --out writes ({e})"
        ) from None
    if not isinstance(saved, dict) or not isinstance(saved.get("points"), dict):
        raise ServelabError(f"--dev {priced}: expected a JSON object with an object 'points'")
    return saved


def dev_points(priced: Path) -> list[dict]:
    """The closed-loop development points priced in `priced` (accuracy/closed_loop.py --out), each with its
    residuals (`ttft`, `tpot`: log(measured / predicted))."""
    saved = read_priced(priced)
    points, _ = read_points(DATA, SYSTEMS)
    dev = [p for p in points if not p.heldout]  # the held-out part is never read here
    rows, _ = priced_rows(dev, saved)
    for p in rows:
        p["ttft"] = math.log(p["ttft_ms"] / ttft_pred(p))
        p["tpot"] = math.log(p["tpot_ms"] / p["tpot_p50"])
    return rows


def dev_coverage(points: list[dict], rows: list[Residual]) -> list[str]:
    """Which development points the bands claim, and how often the claimed ones and all of them (as if
    claimed) lie inside."""
    bands = claimed_bands(rows)
    out = [
        f"closed-loop development points ({len(points)} priced), claim {share(CLAIM)}: claimed where the "
        "point lies inside its engine's residual rows (predict.band_domain.Domain); coverage (%) of the "
        "claimed ones, and of all (as if every one were claimed)",
        f"  {'group':36s} {'n':>5s} {'claimed':>7s} {'TTFT':>6s} {'TPOT':>6s} {'all: TTFT':>9s} {'TPOT':>6s}",
    ]
    groups: dict[str, list[tuple[bool, bool, bool]]] = defaultdict(list)
    reasons: dict[str, int] = defaultdict(int)
    for p in points:
        ttft, tpot = (band_for(bands, p["engine"], m) for m in METRICS)
        assert ttft is not None and tpot is not None and ttft.domain is not None
        asked = Asked(p["system"], p["family"], p["concurrency"], p["isl"], p["osl"])
        outside = ttft.domain.outside(asked)
        kinds = sorted({why.split(",")[0].rsplit(" ", 1)[0] for why in outside})  # "model family", "isl"
        for kind in kinds:
            reasons[kind] += 1
        got = (not outside, ttft.contains(p["ttft"]), tpot.contains(p["tpot"]))
        keys = (p["system"], p["engine"], p["source"], f"{p['engine']}/{p['family']}")
        # what each reason alone says: the points outside by it and by nothing else
        keys += (f"outside by {kinds[0]} alone",) if len(kinds) == 1 else ()
        for key in ("all", *keys):
            groups[key].append(got)
    for key in ["all", *sorted(k for k in groups if k != "all")]:
        g = np.array(groups[key])
        mine = g[g[:, 0]]
        t, d = (f"{pct(np.mean(mine[:, k])):>6s}" if len(mine) else f"{'-':>6s}" for k in (1, 2))
        out.append(
            f"  {key:36s} {len(g):5d} {pct(np.mean(g[:, 0])):>7s} {t} {d} {pct(np.mean(g[:, 1])):>9s} "
            f"{pct(np.mean(g[:, 2])):>6s}"
        )
    said = ", ".join(f"{why} {n}" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]))
    out.append(f"  outside by (points; one point may be outside by several): {said}")
    return out


def dev_widened(points: list[dict]) -> list[str]:
    """Bands from the development points' own residuals, widened as the product widens (unseen_family), with
    a GPU kind or a source standing where the model family stands: counted nested, each kind left out.
    Would a band for predictions outside the calibration rows hold?"""
    out = [
        f"bands from the development points' own residuals (claim {share(CLAIM)}, each engine's where it has "
        f"{MIN_ROWS} points), nested leave-one-group-out: coverage (%) and median width (high / low)"
    ]
    for by in ("system", "source"):
        rows = [Residual(p["engine"], p[by], p["ttft"], p["tpot"]) for p in points]
        checked = coverage(rows, CLAIM)
        widths: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for group in sorted({r.family for r in rows}):
            bands = build_bands([r for r in rows if r.family != group])
            for r in (r for r in rows if r.family == group):
                for metric in METRICS:
                    band = band_for(bands, r.engine, metric)
                    assert band is not None
                    for key in ("all", group):
                        widths[key][metric].append(band.high - band.low)
        out.append(f"  leaving one {by} out:")
        for key in ["all", *sorted({r.family for r in rows})]:
            got = [c for r, c in checked if key in ("all", r.family)]
            cells = "; ".join(
                f"{m.upper()} {pct(np.mean([c[m] for c in got]))} "
                f"wide x{math.exp(np.median(widths[key][m])):,.1f}"
                for m in METRICS
            )
            out.append(f"    {key:28s} {len(got):5d}  {cells}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--residuals", type=Path, default=residuals_path(shipped_calibration()))
    ap.add_argument("--dev", type=Path, help="closed-loop dev points priced by accuracy/closed_loop.py --out")
    args = ap.parse_args(argv)
    try:
        rows = read_residuals(args.residuals)
        points = dev_points(args.dev) if args.dev else []
    except ServelabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    doc = json.loads(args.residuals.read_text())
    engines = ", ".join(f"{e} {sum(r.engine == e for r in rows)}" for e in sorted({r.engine for r in rows}))
    print(f"{args.residuals}: {len(rows)} rows ({engines}); {doc.get('_provenance', '')}")
    print(f"engines with fewer than {MIN_ROWS} rows take every engine's residuals (pooled)\n")
    print("\n".join(shipped_bands(rows)))
    for claim in CLAIMS:
        print()
        print("\n".join(coverage_table(coverage(rows, claim), claim)))
    print()
    print(f"the same without widening (each band at its claim's own quantiles), claim {share(CLAIM)}:")
    plain = coverage_table(coverage(rows, CLAIM, widen=False), CLAIM)
    print("\n".join(plain[1 : plain.index("  -- by family")]))
    print()
    print("\n".join(conditioned_table(doc, rows)))
    print()
    print("\n".join(seen_family(doc, rows)))
    print()
    print("\n".join(kernel_band(doc)))
    print()
    print("\n".join(scaled_comparison(doc, rows)))
    if points:
        print()
        print("\n".join(dev_coverage(points, rows)))
        print()
        print("\n".join(dev_widened(points)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
