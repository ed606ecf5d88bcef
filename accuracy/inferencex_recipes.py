"""The H200 rows of silicon_sample.csv priced as the calibration replays them, with and without the settings
of the InferenceX recipe that measured them (calibrate/recipes.py), at the documented defaults and at each
engine's fit in the shipped calibrated.json (kept or not); relative errors |pred - meas| / meas, median / p90,
by engine and family, over all rows, the rows a recipe covers, and attention-DP rows.

    python accuracy/inferencex_recipes.py --csv PATH/silicon_sample.csv [--engine sglang] [--family deepseek]
        [--rows]
"""

import argparse
import json
import statistics
from dataclasses import replace
from importlib import resources
from pathlib import Path

from servelab.calibrate.price import Pricer, defaults
from servelab.calibrate.rows import ENGINES
from servelab.calibrate.sources import Sources, gather
from servelab.specs import load_system

SUBSETS = {
    "all": lambda c: True,
    "with a recipe": lambda c: c.settings is not None,
    "attention DP": lambda c: c.parallel.dp_attn,
}


def spread(errors: list[float]) -> str:
    p90 = sorted(errors)[int(0.9 * len(errors))]
    return f"{100 * statistics.median(errors):5.1f} % / {100 * p90:5.1f} %"


def variants(engine: str) -> dict[str, dict[str, float]]:
    """The documented defaults and the engine's fit in the shipped calibrated.json (kept or not)."""
    shipped = json.loads((resources.files("servelab.predict") / "data" / "calibrated.json").read_text())
    kept = shipped["engines"].get(engine)
    fit = kept or shipped.get("fitted_not_kept", {}).get(engine)
    name = "calibrated.json fit" + ("" if kept else " (not kept)")
    return {"defaults": defaults()[engine], **({name: fit["params"]} if fit else {})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, required=True)
    ap.add_argument(
        "--engine", action="append", choices=ENGINES, help="default: every engine with recipe rows"
    )
    ap.add_argument("--family", action="append", help="deepseek, gpt-oss, llama, qwen (default: all)")
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args()
    system = load_system("h200_sxm")
    cases = gather(Sources(csv=args.csv), "h200_sxm").cases
    price = Pricer(system, "auto")
    print("TTFT and TPOT error, median / p90")
    for engine in args.engine or sorted({c.engine for c in cases if c.settings is not None}):
        for family in args.family or sorted({c.family for c in cases if c.engine == engine}):
            mine = [c for c in cases if c.engine == engine and c.family == family]
            if not any(c.settings for c in mine):
                continue
            dated = sum(c.settings is not None for c in mine)
            print(f"\n{engine} {family}: {len(mine)} rows, {dated} with a recipe")
            for name, params in variants(engine).items():
                for settings in ("engine defaults", "recipe"):
                    priced = [
                        (c, price(c if settings == "recipe" else replace(c, settings=None), params))
                        for c in mine
                    ]
                    for subset, keep in SUBSETS.items():
                        sel = [(c, p) for c, p in priced if keep(c)]
                        if not sel or (subset != "all" and len(sel) == len(priced)):
                            continue
                        ttft = [abs(t - c.ttft_ms) / c.ttft_ms for c, (t, _) in sel]
                        tpot = [abs(p - c.tpot_ms) / c.tpot_ms for c, (_, p) in sel]
                        print(
                            f"  {name:32s} {settings:16s} {subset:13s} {len(sel):3d} rows  "
                            f"TTFT {spread(ttft)}  TPOT {spread(tpot)}"
                        )
                    if args.rows:
                        for c, (t, p) in priced:
                            print(
                                f"    {c.row_id[:60]:60s} {c.parallel.label():16s} c{c.concurrency:<4d} "
                                f"{c.isl}/{c.osl} {c.measured or '-':10s} measured {c.ttft_ms:8.0f} ms "
                                f"{c.tpot_ms:5.1f} ms  predicted {t:8.0f} ms {p:5.1f} ms"
                            )


if __name__ == "__main__":
    main()
