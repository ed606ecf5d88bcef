"""SGLang's H200 rows of AIConfigurator's silicon_sample.csv, replayed as `calibrate engines` replays them, at
the documented defaults and at the shipped calibration's SGLang parameters: TTFT and TPOT errors per model
family (median and p90 of |pred - meas| / meas). Writes nothing.

    python accuracy/sglang_rows.py --csv silicon_sample.csv            # about 20 s on an idle core
    python accuracy/sglang_rows.py --csv silicon_sample.csv --rows llama   # and each row of one family
    python accuracy/sglang_rows.py --csv silicon_sample.csv --lofo   # and fit, leave one family out (minutes)

`--lofo` is SGLang's part of `servelab calibrate engines` (the same fit and cross-validation, on these rows).
"""

import argparse
import sys
from pathlib import Path

import numpy as np

from servelab.calibrate.crossval import leave_one_family_out
from servelab.calibrate.fit import fit_engine
from servelab.calibrate.price import Pricer, defaults, fit_start
from servelab.calibrate.sources import Sources, gather
from servelab.errors import ServelabError
from servelab.predict.engines import read_calibration, shipped_calibration
from servelab.specs import load_system


def errors(xs: list[float]) -> str:
    return f"{100 * np.median(xs):5.1f} % (p90 {100 * np.percentile(xs, 90):5.1f} %)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, required=True, help="AIConfigurator's silicon_sample.csv")
    ap.add_argument("--system", default="h200_sxm")
    ap.add_argument("--rows", metavar="FAMILY", help="also print every row of this family")
    ap.add_argument("--lofo", action="store_true", help="also fit and cross-validate as calibrate engines")
    ap.add_argument("--iters", type=int, default=300, help="Nelder-Mead iterations per fit (--lofo)")
    args = ap.parse_args(argv)
    system = load_system(args.system)
    cases = [c for c in gather(Sources(csv=args.csv), args.system).cases if c.engine == "sglang"]
    variants = {"defaults": defaults()["sglang"]}
    shipped = read_calibration(shipped_calibration()).engines.get("sglang")
    if shipped is not None:
        variants["shipped"] = shipped.params
    price = Pricer(system, "auto")
    for name, params in variants.items():
        ttft: dict[str, list[float]] = {}
        tpot: dict[str, list[float]] = {}
        for c in cases:
            t, p = price(c, params)
            for key in (c.family, "all"):
                ttft.setdefault(key, []).append(abs(t - c.ttft_ms) / c.ttft_ms)
                tpot.setdefault(key, []).append(abs(p - c.tpot_ms) / c.tpot_ms)
            if args.rows == c.family:
                print(
                    f"  {name} {c.parallel.label()} c{c.concurrency} {c.isl}/{c.osl}: TTFT {c.ttft_ms:,.0f} "
                    f"measured, {t:,.0f} predicted; TPOT {c.tpot_ms:.1f}, {p:.1f} ms"
                )
        for key in sorted(ttft):
            print(
                f"{name:8s} {key:9s} {len(ttft[key]):3d} rows"
                f"  TTFT {errors(ttft[key])}  TPOT {errors(tpot[key])}"
            )
    if args.lofo:
        start = fit_start()
        params, lin = fit_engine(cases, start["sglang"], price, args.iters)
        cv = leave_one_family_out(cases, start, price, args.iters, {"sglang": (cases, lin)})
        print(f"fitted, leave one family out: TTFT {errors(cv['ttft'])}  TPOT {errors(cv['tpot'])}")
        for key, v in cv["by_family"].items():
            print(f"  {key:16s} TTFT {v['ttft']['median']:6.1%}  TPOT {v['tpot']['median']:6.1%}")
        print("fitted on all rows: " + "  ".join(f"{k}={v:.3g}" for k, v in params.items()))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ServelabError as e:
        sys.exit(f"error: {e}")
