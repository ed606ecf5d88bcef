"""The H200 rows of silicon_sample.csv priced as the calibration replays them, with and without the settings
of the InferenceX recipe that measured them (calibrate/recipes.py) and its client's request lengths, at the
documented defaults and at each engine's fit in the shipped calibrated.json (kept or not); relative errors
|pred - meas| / meas, median / p90, by engine and family, over all rows, the rows a recipe covers, and
attention-DP rows. The replays: "before" (engine defaults, lengths U[0.8 L, 1.2 L]), "lengths" (InferenceX's
client lengths U[0.8 L, L] alone), "settings" (the recipe's engine settings alone), "recipe" (both: the
calibration's replay).

    python accuracy/inferencex_recipes.py --csv PATH/silicon_sample.csv [--engine sglang] [--family deepseek]
        [--rows]
"""

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

from servelab.calibrate.calibration_file import CALIBRATED
from servelab.calibrate.document import CalibrationDocument
from servelab.calibrate.price import Pricer, defaults
from servelab.calibrate.recipes import RunSettings
from servelab.calibrate.rows import ENGINES, Case
from servelab.calibrate.sources import Sources, gather
from servelab.engines import Engine
from servelab.specs import load_system

REPLAYS = ("before", "lengths", "settings", "recipe")


def replays(c: Case) -> dict[str, Case]:
    """The row under each replay (a row without recipe settings is the same under all four)."""
    s = c.settings
    if s is None:
        return dict.fromkeys(REPLAYS, c)
    return {
        "before": replace(c, settings=None),
        "lengths": replace(c, settings=RunSettings(recipe=s.recipe, client_range_ratio=s.client_range_ratio)),
        "settings": replace(c, settings=replace(s, client_range_ratio=None)),
        "recipe": c,
    }


SUBSETS = {
    "all": lambda c: True,
    "with a recipe": lambda c: c.settings is not None,
    "attention DP": lambda c: c.parallel.dp_attn,
}


def spread(errors: list[float]) -> str:
    p90 = sorted(errors)[int(0.9 * len(errors))]
    return f"{100 * statistics.median(errors):5.1f} % / {100 * p90:5.1f} %"


def variants(engine: str) -> list[tuple[str, dict[str, float], bool]]:
    """(name, parameters, whether the shipped calibrated.json prices the engine so): the documented defaults
    and the engine's fit in the shipped calibrated.json (kept or not)."""
    shipped = CalibrationDocument.read(CALIBRATED)
    kept = shipped.engines.get(Engine(engine))
    fit = kept or shipped.fitted_not_kept.get(Engine(engine))
    out = [("defaults", defaults()[engine], kept is None)]
    if fit:
        out.append(("calibrated.json fit" + ("" if kept else " (not kept)"), fit.params, kept is not None))
    return out


def line(label: str, sel: list[tuple[Case, tuple[float, float]]]) -> str:
    ttft = [abs(t - c.ttft_ms) / c.ttft_ms for c, (t, _) in sel]
    tpot = [abs(p - c.tpot_ms) / c.tpot_ms for c, (_, p) in sel]
    return f"  {label} {len(sel):3d} rows  TTFT {spread(ttft)}  TPOT {spread(tpot)}"


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
    # the rows with a recipe, priced under each replay at the defaults and as calibrated.json prices them
    totals: dict[tuple[str, str, str], list] = {}  # (engine or "all", view, replay) -> priced rows
    for engine in args.engine or sorted({c.engine for c in cases if c.settings is not None}):
        for family in args.family or sorted({c.family for c in cases if c.engine == engine}):
            mine = [c for c in cases if c.engine == engine and c.family == family]
            if not any(c.settings for c in mine):
                continue
            covered = sum(c.settings is not None for c in mine)
            print(f"\n{engine} {family}: {len(mine)} rows, {covered} with a recipe")
            for name, params, shipped in variants(engine):
                for replay in REPLAYS:
                    priced = [(c, price(replays(c)[replay], params)) for c in mine]
                    for subset, keep in SUBSETS.items():
                        sel = [(c, p) for c, p in priced if keep(c)]
                        if sel and (subset == "all" or len(sel) < len(priced)):
                            print(line(f"{name:32s} {replay:9s} {subset:13s}", sel))
                    dated = [(c, p) for c, p in priced if c.settings is not None]
                    views = (["defaults"] if name == "defaults" else []) + (["as shipped"] if shipped else [])
                    for view in views:
                        for who in (engine, "all"):
                            totals.setdefault((who, view, replay), []).extend(dated)
                    if args.rows:
                        for c, (t, p) in priced:
                            print(
                                f"    {c.row_id[:60]:60s} {c.parallel.label():16s} c{c.concurrency:<4d} "
                                f"{c.isl}/{c.osl} {c.measured or '-':10s} measured {c.ttft_ms:8.0f} ms "
                                f"{c.tpot_ms:5.1f} ms  predicted {t:8.0f} ms {p:5.1f} ms"
                            )
    print("\nthe rows with a recipe: at the documented defaults, and as calibrated.json prices them")
    for who in dict.fromkeys(k[0] for k in totals):
        for view in ("defaults", "as shipped"):
            for replay in REPLAYS:
                print(line(f"{who:7s} {view:24s} {replay:9s} {'':13s}", totals[who, view, replay]))


if __name__ == "__main__":
    main()
