"""Where TTFT goes wrong: AIConfigurator's measured H200 rows replayed as in calibrate_engines.py, at the
engine profiles' documented defaults (no fit), errors by engine and by concurrency band. Writes nothing.

    python accuracy/ttft_by_load.py            # 18 s on an idle core, minutes on a loaded one
    python accuracy/ttft_by_load.py --every 4  # a quarter of the rows
    python accuracy/ttft_by_load.py --kv-dtype fp8 --engine trtllm  # read the rows as FP8-KV runs

The file does not say which KV-cache dtype a row ran; the rows are read with the checkpoint's (BF16 for every
model here). `--kv-dtype` replays them with another, for the engines named by `--engine` (default all).
"""

import argparse
import sys
from collections import defaultdict
from dataclasses import replace

import numpy as np

from servelab.calibrate import aic
from servelab.calibrate.price import Pricer, base_profiles
from servelab.calibrate.rows import build_cases, read_rows
from servelab.errors import ServelabError
from servelab.specs import Dtype, load_system

BANDS = ((8, "c<=8"), (64, "c<=64"), (None, "c>64"))


def band(concurrency: int) -> str:
    return next(name for top, name in BANDS if top is None or concurrency <= top)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", default="h200_sxm")
    ap.add_argument("--every", type=int, default=1, help="use every n-th row (quick runs)")
    ap.add_argument("--kv-dtype", choices=("bf16", "fp8"), help="replay the rows with this KV-cache dtype")
    ap.add_argument("--engine", action="append", help="the engines --kv-dtype applies to (default all)")
    args = ap.parse_args(argv)
    path, _ = aic.aic_csv()
    cases, _ = build_cases(read_rows(path), args.system)
    price = Pricer(load_system(args.system), "aggregated")
    ratios: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for case in cases[:: args.every]:
        if args.kv_dtype and (not args.engine or case.engine in args.engine):
            precision = case.model.precision.model_copy(update={"kv_cache": Dtype(args.kv_dtype)})
            case = replace(case, model=case.model.model_copy(update={"precision": precision}))
        try:
            ttft, tpot = price(case, {})
        except ServelabError:
            continue
        ratio = (ttft / case.ttft_ms, tpot / case.tpot_ms)
        for key in ((case.engine, band(case.concurrency)), (case.engine, "all"), ("all", "all")):
            ratios[key].append(ratio)
    print(f"engine profiles: {', '.join(sorted({p.source for p in base_profiles().values()}))}")
    print(f"{'engine':7s} {'band':6s} {'rows':>5s}  TTFT pred/meas  |err| med  p90   TPOT |err| med  p90")
    for (engine, name), values in sorted(ratios.items()):
        r = np.array(values)
        err = np.abs(r - 1)
        ttft, tpot = (
            (np.median(err[:, 0]), np.percentile(err[:, 0], 90)),
            (
                np.median(err[:, 1]),
                np.percentile(err[:, 1], 90),
            ),
        )
        print(
            f"{engine:7s} {name:6s} {len(r):5d}  {np.median(r[:, 0]):13.2f}  {ttft[0]:9.1%} {ttft[1]:6.1%}  "
            f"{tpot[0]:13.1%} {tpot[1]:6.1%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
