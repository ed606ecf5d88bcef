"""The aggregated twin's output throughput against the development part of InferenceX's MiniMax-M2.5
closed-loop results (tests/data/closed_loop, the rows not in heldout.txt; the only aggregated development
evidence with a measured throughput): the benchmark as its client ran it (10 x C prompts from idle, the
measuring window, as calibrate.price replays it) and the steady state (`servelab estimate --mode agg`'s
default: C of warm-up, max(2C, 64) measured; its rates by Little's law since "The aggregated points' rate by
Little's law too", by the window before). Median and range of predicted / measured - 1. Writes nothing.

    PYTHONPATH=src python accuracy/agg_rate_rows.py   # 2.5 s of CPU with the simulations kept

Run on a commit before that change for the window's steady state.
"""

import json
import statistics
from pathlib import Path

from servelab.calibrate.closed_loop import heldout_ids, inferencex_points
from servelab.calibrate.price import Pricer
from servelab.predict.engines import read_calibration, shipped_calibration
from servelab.specs import load_system

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "closed_loop"


def main() -> int:
    fitted = read_calibration(shipped_calibration()).engines.get("vllm")  # as accuracy/closed_loop.py prices
    params = dict(fitted.params) if fitted else {}
    system = load_system("h200_sxm")
    ways = {"benchmark replay": Pricer(system, "aggregated"), "steady state": Pricer(system, "aggregated", 0)}
    errors: dict[str, list[float]] = {way: [] for way in ways}
    print("row | measured output tok/s | " + " | ".join(ways))
    for point in inferencex_points(DATA, heldout_ids(DATA)):
        if point.heldout:
            continue  # held out: its measurements are not read here
        case = point.case
        measured = json.loads((DATA / "inferencex" / "results" / case.row_id).read_text())[
            "output_throughput"
        ]
        cells = []
        for way, pricer in ways.items():
            predicted = pricer.estimate(case, params).output_tokens_per_s_per_gpu * case.parallel.gpus
            errors[way].append(predicted / measured - 1.0)
            cells.append(f"{predicted:8.1f} ({100 * errors[way][-1]:+5.1f} %)")
        print(f"{case.row_id:52s} | {measured:8.1f} | " + " | ".join(cells))
    for way, errs in errors.items():
        print(
            f"{way}: {len(errs)} rows, median error {100 * statistics.median(errs):+.1f} %, median |error| "
            f"{100 * statistics.median(map(abs, errs)):.1f} %, "
            f"range {100 * min(errs):+.1f} to {100 * max(errs):+.1f} %"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
