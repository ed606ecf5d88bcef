"""SGLang's H200 rows that carry no recipe (AIConfigurator's own campaign: Llama-3.1-8B and Qwen3-235B on
sglang 0.5.6.post2) replayed under a chosen client protocol, at the documented defaults or the shipped
calibration: TTFT and TPOT errors per model family (median and p90 of |pred - meas| / meas) and the median of
measured / predicted TTFT. The rows do not say how they were measured, so this shows how much of the TTFT
error is the protocol: `calibrate engines` replays them as 10 x concurrency prompts from an idle engine,
every request counted, lengths spread 0.2 around the row's. Writes nothing.

    python accuracy/sglang_protocol.py --csv silicon_sample.csv                    # calibrate's replay
    python accuracy/sglang_protocol.py --csv silicon_sample.csv --warmup 2 --prompts 20 --spread 0
    python accuracy/sglang_protocol.py --csv silicon_sample.csv --mixed-chunk --spread 0 --rows llama

`--warmup 2 --prompts 20 --spread 0` is the benchmark AIConfigurator's generator writes (aiperf, 2 x
concurrency warm-up requests, 20 x concurrency measured, lengths without spread); `--mixed-chunk` is SGLang's
--enable-mixed-chunk, which that generator sets for aggregated SGLang. About 15 s per family on an idle core.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from sglang_rows import errors  # this folder's SGLang-row script: the same median / p90 line

from servelab.calibrate.params import PARAMS
from servelab.calibrate.price import base_profiles, defaults
from servelab.calibrate.sources import Sources, gather
from servelab.errors import ServelabError
from servelab.predict.engines import read_calibration, shipped_calibration
from servelab.predict.serving import Workload, estimate_aggregated
from servelab.specs import load_system


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, required=True, help="AIConfigurator's silicon_sample.csv")
    ap.add_argument("--system", default="h200_sxm")
    ap.add_argument("--prompts", type=float, default=10.0, help="measured requests per client")
    ap.add_argument("--warmup", type=float, default=0.0, help="warm-up requests per client, not counted")
    ap.add_argument("--spread", type=float, default=0.2, help="lengths uniform in row x [1 - s, 1 + s]")
    ap.add_argument("--mixed-chunk", action="store_true", help="SGLang's --enable-mixed-chunk")
    ap.add_argument("--shipped", action="store_true", help="the shipped calibration's SGLang parameters")
    ap.add_argument("--rows", metavar="FAMILY", help="also print every row of this family")
    args = ap.parse_args(argv)
    if args.prompts <= 0 or args.warmup < 0 or not 0 <= args.spread < 1:
        raise ServelabError("--prompts must be > 0, --warmup >= 0 and --spread in [0, 1)")
    system = load_system(args.system)
    cases = gather(Sources(csv=args.csv), args.system).cases
    cases = [c for c in cases if c.engine == "sglang" and c.settings is None]
    params = dict(defaults()["sglang"])
    if args.shipped:
        fit = read_calibration(shipped_calibration()).engines.get("sglang")
        params.update(fit.params if fit is not None else {})
    update: dict = {k: v for k, v in params.items() if k in PARAMS}
    if args.mixed_chunk:
        update["mixed_chunk"] = True  # SglangPolicy.mixed_chunk
    engine = base_profiles()["sglang"].model_copy(update=update)
    ttft: dict[str, list[float]] = {}
    tpot: dict[str, list[float]] = {}
    ratio: dict[str, list[float]] = {}
    for c in cases:
        clients = c.concurrency
        wl = Workload(
            isl=c.isl,
            osl=c.osl,
            concurrency=clients,
            warmup=round(args.warmup * clients),
            num_requests=max(1, round(args.prompts * clients)),
            range_ratio=args.spread,
        )
        est = estimate_aggregated(c.model, system, c.parallel, engine, clients, c.isl, c.osl, workload=wl)
        t, p = est.ttft_ms, est.tpot_ms
        for key in (c.family, "all"):
            ttft.setdefault(key, []).append(abs(t - c.ttft_ms) / c.ttft_ms)
            tpot.setdefault(key, []).append(abs(p - c.tpot_ms) / c.tpot_ms)
            ratio.setdefault(key, []).append(c.ttft_ms / t)
        if args.rows == c.family:
            print(
                f"  {c.parallel.label()} c{clients} {c.isl}/{c.osl}: TTFT {c.ttft_ms:,.0f} measured "
                f"({c.ttft_ms / c.tpot_ms:.0f} TPOTs), {t:,.0f} predicted ({t / p:.0f}); "
                f"TPOT {c.tpot_ms:.1f}, {p:.1f} ms"
            )
    for key in sorted(ttft):
        print(
            f"{key:9s} {len(ttft[key]):3d} rows  TTFT {errors(ttft[key])}  TPOT {errors(tpot[key])}"
            f"  measured / predicted TTFT {np.median(ratio[key]):.2f}"
        )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ServelabError as e:
        sys.exit(f"error: {e}")
