"""A stand-in for the leave-one-family-out figures of a rule change to a fitted engine while its refit
cannot run: each row's shipped out-of-sample prediction (calibrated.residuals.json) scaled by how the change
moves the row's in-sample prediction with the shipped fit. Not a refit: the left-out fits' terms stay as
they were.

    # each engine's rows priced in sample with the shipped fit (vLLM, which keeps no fit: at its defaults),
    # once with the code before the change and once after (PYTHONPATH picks which)
    PYTHONPATH=OLD/src python accuracy/lofo_proxy.py price silicon_sample.csv sglang before.json
    PYTHONPATH=src python accuracy/lofo_proxy.py price silicon_sample.csv sglang after.json
    PYTHONPATH=src python accuracy/lofo_proxy.py price silicon_sample.csv vllm vllm.json
    PYTHONPATH=src python accuracy/lofo_proxy.py combine before.json after.json vllm.json

    # the residuals file as the code now would price it, for accuracy/bands.py --residuals (OLD: the commit
    # that wrote the shipped residuals; `price` reads the fit from the calibration file, so it runs there too)
    PYTHONPATH=src python accuracy/lofo_proxy.py residuals before.json after.json vllm.json OUT.json
"""

import argparse
import json
from pathlib import Path

import numpy as np

from servelab.calibrate.pool import SERIAL, price_rows
from servelab.calibrate.price import Pricer, defaults, pick_mode, usable
from servelab.calibrate.sources import Sources, gather
from servelab.specs import load_system

RESIDUALS = Path(__file__).resolve().parents[1] / "src/servelab/predict/data/calibrated.residuals.json"


def proxied(before: dict, after: dict, vllm: dict, scaled: bool = True) -> list[tuple[dict, float, float]]:
    """Each shipped residual row with its prediction as the code after the change would make it: vLLM's
    (no fit) priced again, a fitted engine's scaled by how the change moves its in-sample prediction (not
    scaled: as shipped)."""
    out = []
    for r in json.loads(RESIDUALS.read_text())["rows"]:
        ttft, tpot = vllm[r["id"]] if r["engine"] == "vllm" else (r["pred_ttft_ms"], r["pred_tpot_ms"])
        if scaled and r["id"] in before:
            ttft *= after[r["id"]][0] / before[r["id"]][0]
            tpot *= after[r["id"]][1] / before[r["id"]][1]
        out.append((r, ttft, tpot))
    return out


def write_residuals(before: dict, after: dict, vllm: dict, out: Path) -> None:
    doc = json.loads(RESIDUALS.read_text())
    doc["rows"] = [
        r | {"pred_ttft_ms": round(ttft, 4), "pred_tpot_ms": round(tpot, 5)}
        for r, ttft, tpot in proxied(before, after, vllm)
    ]
    doc["_provenance"] += "; re-priced by accuracy/lofo_proxy.py residuals (not a refit)"
    out.write_text(json.dumps(doc, indent=1) + "\n")


def price(csv: Path, engine: str, out: Path) -> None:
    got = gather(Sources(csv=csv), "h200_sxm")
    pricer = Pricer(load_system("h200_sxm"), pick_mode("auto"))
    cases = [c for c in usable(got.cases, pricer, got.skipped) if c.engine == engine]
    fit = json.loads(RESIDUALS.with_name("calibrated.json").read_text())["engines"].get(engine)
    params = fit["params"] if engine != "vllm" and fit else defaults()["vllm"]  # as fitted_params reads it
    preds = price_rows([(c, params) for c in cases], pricer, SERIAL, "rows")
    out.write_text(
        json.dumps({c.row_id: [float(t), float(d)] for c, (t, d) in zip(cases, preds, strict=True)}) + "\n"
    )


def combine(before: dict, after: dict, vllm: dict) -> dict:
    """Median and p90 |error| of TTFT and TPOT: the changed engine's rows and all rows, shipped and scaled."""
    report = {}
    for scaled in (False, True):
        errors: dict[str, list] = {"all": [], "changed": []}
        for r, ttft, tpot in proxied(before, after, vllm, scaled):
            if r["id"] in before:
                errors["changed"].append((abs(ttft / r["ttft_ms"] - 1), abs(tpot / r["tpot_ms"] - 1)))
            errors["all"].append((abs(ttft / r["ttft_ms"] - 1), abs(tpot / r["tpot_ms"] - 1)))
        report["scaled" if scaled else "shipped"] = {
            rows: {
                metric: {"n": len(e), "median": float(np.median(col)), "p90": float(np.percentile(col, 90))}
                for metric, col in zip(("ttft", "tpot"), np.array(e).T, strict=True)
            }
            for rows, e in errors.items()
        }
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("price")
    p.add_argument("csv", type=Path)
    p.add_argument("engine")
    p.add_argument("out", type=Path)
    c = sub.add_parser("combine")
    c.add_argument("files", type=Path, nargs=3, help="before.json after.json vllm.json")
    r = sub.add_parser("residuals")
    r.add_argument("files", type=Path, nargs=3, help="before.json after.json vllm.json")
    r.add_argument("out", type=Path)
    args = ap.parse_args()
    if args.step == "price":
        price(args.csv, args.engine, args.out)
    elif args.step == "residuals":
        write_residuals(*(json.loads(f.read_text()) for f in args.files), args.out)
    else:
        before, after, vllm = (json.loads(f.read_text()) for f in args.files)
        print(json.dumps(combine(before, after, vllm), indent=1))


if __name__ == "__main__":
    main()
