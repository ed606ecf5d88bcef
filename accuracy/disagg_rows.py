"""servelab's twin of one given disaggregated split against AIConfigurator's measured disagg rows
(tests/data/closed_loop/aiconfigurator/silicon_sample_rows.csv, `mode == disagg`), with AIConfigurator's own
disaggregated estimate of the same rows beside it. The rows, their mapping and the errors:
servelab.calibrate.disagg_rows; the pricing: servelab.predict.plan.split (`servelab estimate --mode disagg`).

    PYTHONPATH=src python accuracy/disagg_rows.py [--part dev|heldout] [--out accuracy/results/X.json]
        [--aic-python /path/to/python]   # run AIConfigurator on the rows its cache (.cache/) lacks

AIConfigurator's answers are cached by row id in .cache/aic-disagg-predictions[-heldout].json
(accuracy/aic_disagg_worker.py, run by a python with aiconfigurator 0.12).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from servelab.calibrate.disagg_rows import by_bound, compare, disagg_rows, price_rows, summary_cells

ROOT = Path(__file__).resolve().parent.parent
CSV = ROOT / "tests/data/closed_loop/aiconfigurator/silicon_sample_rows.csv"
HELDOUT = ROOT / "tests/data/closed_loop/heldout.txt"
WORKER = Path(__file__).resolve().parent / "aic_disagg_worker.py"


def aic_answers(raws: list[dict], part: str, aic_python: Path | None) -> dict[str, dict]:
    """AIConfigurator's disagg estimate per row id from its cache; with `aic_python`, the rows the cache lacks
    are asked first."""
    cache = (
        ROOT
        / ".cache"
        / ("aic-disagg-predictions-heldout.json" if part == "heldout" else "aic-disagg-predictions.json")
    )
    if aic_python is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [str(aic_python), str(WORKER)], input=json.dumps([raws, str(cache)]), text=True, check=True
        )
    return json.loads(cache.read_text()) if cache.is_file() else {}


def aic_failures(raws: list[dict], aic: dict[str, dict]) -> dict[str, int]:
    failures: dict[str, int] = {}
    for raw in raws:
        got = aic.get(raw["id"])
        if got is None:
            key = "not asked (the run was stopped before this row)"
        elif "error" in got:
            key = re.sub(r"\d+(\.\d+)?", "N", got["error"][-1].split(": ", 1)[1])[:120]
        else:
            continue
        failures[key] = failures.get(key, 0) + 1
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("dev", "heldout"), default="dev")
    ap.add_argument("--out", type=Path, help="write the JSON report here")
    ap.add_argument(
        "--aic-python", type=Path, help="a python with aiconfigurator 0.12: ask it for missing rows"
    )
    ap.add_argument("--limit", type=int, help="only the first N rows (a quick look)")
    args = ap.parse_args(argv)
    raws = disagg_rows(args.part, CSV, HELDOUT)[: args.limit]
    echo = lambda s: print(s, file=sys.stderr)  # noqa: E731
    echo(f"{len(raws)} disagg rows ({args.part})")
    priced, skipped = price_rows(raws, echo)
    aic = aic_answers(raws, args.part, args.aic_python)
    table = compare(priced, aic)
    failures = aic_failures(raws, aic)
    head = "  n   TTFT    TPOT    tput  TTFT<1.5x"
    print(f"{'rows':22s} | servelab (all priced): {head} | servelab on AIC's rows: {head} | AIC: {head}")
    for name, t in table.items():
        cells = (
            summary_cells(t["servelab"]),
            summary_cells(t["servelab_on_aic_rows"]),
            summary_cells(t["aiconfigurator"]),
        )
        print(f"{name:22s} | " + " | ".join(cells))
    print(f"rows: {len(raws)}; servelab priced {len(priced)}; unpriceable by reason:")
    for why, n in sorted(skipped.items(), key=lambda kv: -kv[1]):
        print(f"  {n:4d}  {why}")
    print("AIConfigurator could not answer:")
    for why, n in sorted(failures.items(), key=lambda kv: -kv[1]):
        print(f"  {n:4d}  {why}")
    bound: dict[str, int] = {}
    for _, pred in priced:
        bound[pred["bound"]] = bound.get(pred["bound"], 0) + 1
    print(f"servelab's binding pool: {bound}")
    both = [(r, p) for r, p in priced if "ttft_ms" in aic.get(r.row_id, {})]
    groups = {"every row priced": by_bound(priced), "rows both answer": by_bound(both)}
    print(
        "throughput's error by what it misses: as predicted, with the measured TPOT, with the measured TTFT"
    )
    for part, groups_by_bound in groups.items():  # not `table`: the report's "errors" below is that one
        print(f"  {part}:")
        for name, t in groups_by_bound.items():
            print(
                f"    {name:32s} {int(t['n']):4d} {100 * t['median_throughput']:6.1f}% "
                f"{100 * t['median_throughput_by_ttft']:6.1f}% {100 * t['median_throughput_by_tpot']:6.1f}%"
            )
    if args.out:
        report = {
            "part": args.part,
            "rows": len(raws),
            "priced": len(priced),
            "unpriceable": skipped,
            "aic_unanswered": failures,
            "bound": bound,
            "errors": table,
            "by_bound": groups,
            "per_row": [
                {
                    **r.record(),
                    "servelab": p,
                    "aiconfigurator": {k: aic[r.row_id].get(k) for k in ("ttft_ms", "tpot_ms")}
                    if "ttft_ms" in aic.get(r.row_id, {})
                    else None,
                }
                for r, p in priced
            ],
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
