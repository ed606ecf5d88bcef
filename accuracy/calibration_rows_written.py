"""The written calibration's errors on AIConfigurator's h200_sxm sample without refitting: vLLM's rows priced
at its documented defaults (the shipped calibration keeps no vLLM fit, so that is what it predicts for
them), the other engines' rows read from the shipped out-of-sample residuals (calibrated.residuals.json).
A quick check of what a change to vLLM's defaults does to section 4's targets while a refit cannot run.

`--fitted ENGINE ...` also prices those engines' rows with the shipped calibration's fitted terms, in sample
(the fit saw these rows; a change to a fitted engine's rules needs a refit for its leave-one-family-out
figures), by engine and family: what the change does to the replay before a refit moves the terms.

    PYTHONPATH=src python accuracy/calibration_rows_written.py silicon_sample.csv --out rows.json
    PYTHONPATH=src python accuracy/calibration_rows_written.py silicon_sample.csv --fitted sglang trtllm
"""

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from servelab.calibrate.fit import errors_of, summary
from servelab.calibrate.price import Pricer, defaults, pick_mode, usable
from servelab.calibrate.sources import Sources, gather
from servelab.predict.engines import fitted_params
from servelab.specs import load_system

RESIDUALS = Path(__file__).resolve().parents[1] / "src/servelab/predict/data/calibrated.residuals.json"


def fitted_rows(cases: list, price: Pricer, engines: list[str]) -> dict:
    """TTFT and TPOT errors of these engines' rows priced with the shipped fit, by engine and by family."""
    groups = defaultdict(list)
    for c in cases:
        if c.engine in engines:
            groups[str(c.engine)].append(c)
            groups[f"{c.engine}/{c.family}"].append(c)
    report = {}
    for name, rows in sorted(groups.items()):
        params = fitted_params(name.split("/")[0])
        ttft, tpot = errors_of(rows, params, price)
        report[name] = {"ttft": summary(ttft), "tpot": summary(tpot)}
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path, help="AIConfigurator's systems/silicon_sample.csv")
    ap.add_argument(
        "--fitted", nargs="*", default=[], help="engines whose rows to price with the shipped fit"
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    got = gather(Sources(csv=args.csv), "h200_sxm")
    price = Pricer(load_system("h200_sxm"), pick_mode("auto"))
    cases = usable(got.cases, price, got.skipped)
    rows = [c for c in cases if c.engine == "vllm"]
    documented = defaults()
    ttft, tpot = errors_of(rows, {}, lambda c, p: price(c, documented[c.engine]))
    others = [r for r in json.loads(RESIDUALS.read_text())["rows"] if r["engine"] != "vllm"]
    other_ttft = np.array([abs(r["pred_ttft_ms"] / r["ttft_ms"] - 1) for r in others])
    other_tpot = np.array([abs(r["pred_tpot_ms"] / r["tpot_ms"] - 1) for r in others])
    report = {
        "vllm_rows": {"ttft": summary(ttft), "tpot": summary(tpot)},
        "written_all": {
            "ttft": summary(np.concatenate([ttft, other_ttft])),
            "tpot": summary(np.concatenate([tpot, other_tpot])),
        },
    }
    if args.fitted:
        report["shipped_fit_in_sample"] = fitted_rows(cases, price, args.fitted)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
