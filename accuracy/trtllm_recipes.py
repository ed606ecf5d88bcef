"""TensorRT-LLM's H200 rows of silicon_sample.csv priced as the calibration replays them, with and without
the settings of the InferenceX recipe that measured them (calibrate/recipes.py), at the documented defaults
and at the TensorRT-LLM fit of the shipped calibrated.json (kept or not); relative errors |pred - meas| / meas
by family and by attention DP.

    python accuracy/trtllm_recipes.py --csv PATH/silicon_sample.csv [--family deepseek] [--rows]
"""

import argparse
import json
import statistics
from dataclasses import replace
from importlib import resources
from pathlib import Path

from servelab.calibrate.price import Pricer, defaults
from servelab.calibrate.sources import Sources, gather
from servelab.specs import load_system


def spread(errors: list[float]) -> str:
    p90 = sorted(errors)[int(0.9 * len(errors))]
    return f"{100 * statistics.median(errors):5.1f} % / {100 * p90:5.1f} %"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, required=True)
    ap.add_argument("--family", action="append", help="deepseek, gpt-oss, llama (default: all)")
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args()
    system = load_system("h200_sxm")
    cases = [c for c in gather(Sources(csv=args.csv), "h200_sxm").cases if c.engine == "trtllm"]
    shipped = json.loads((resources.files("servelab.predict") / "data" / "calibrated.json").read_text())
    fit = (shipped["engines"].get("trtllm") or shipped.get("fitted_not_kept", {}).get("trtllm") or {}).get(
        "params"
    )
    variants = {"defaults": defaults()["trtllm"], **({"calibrated.json fit": fit} if fit else {})}
    price = Pricer(system, "auto")
    print("TTFT and TPOT error, median / p90")
    for family in args.family or sorted({c.family for c in cases}):
        mine = [c for c in cases if c.family == family]
        print(
            f"\n{family}: {len(mine)} rows, {sum(c.settings is not None for c in mine)} with recipe settings"
        )
        for name, params in variants.items():
            for settings in ("engine defaults", "recipe"):
                priced = [
                    (c, price(c if settings == "recipe" else replace(c, settings=None), params)) for c in mine
                ]
                for subset, keep in (("all", lambda c: True), ("attention DP", lambda c: c.parallel.dp_attn)):
                    sel = [(c, p) for c, p in priced if keep(c)]
                    if not sel or (subset != "all" and len(sel) == len(priced)):
                        continue
                    ttft = [abs(t - c.ttft_ms) / c.ttft_ms for c, (t, _) in sel]
                    tpot = [abs(p - c.tpot_ms) / c.tpot_ms for c, (_, p) in sel]
                    print(
                        f"  {name:20s} {settings:16s} {subset:13s} {len(sel):3d} rows  "
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
