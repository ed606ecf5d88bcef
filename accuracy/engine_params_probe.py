"""What one engine parameter does to one engine's rows: the rows of the engine calibration (AIConfigurator's
H200 rows, as `servelab calibrate engines` reads them) of ENGINE and FAMILY priced at the engine profile's
documented defaults with NAME=VALUE overrides, then the TTFT / TPOT errors (median / p90), the median
predicted / measured ratio and the rows above 50 % TTFT error. In sample by construction: it shows what a
term buys on the rows it is set for and what it costs on another family, not what a fit would transfer.

    python accuracy/engine_params_probe.py vllm gpt-oss moe_prompt_token_us=0.25    # seconds on 2 cores
    python accuracy/engine_params_probe.py vllm qwen moe_prompt_token_us=0.25 --rows
"""

import argparse
import sys

import numpy as np

from servelab.calibrate.pool import Jobs, price_rows, workers_for
from servelab.calibrate.price import Pricer, defaults, pick_mode
from servelab.calibrate.rows import ENGINES
from servelab.calibrate.sources import Sources, gather
from servelab.errors import ServelabError
from servelab.predict.engines import EngineProfile
from servelab.specs import load_system


def overrides(pairs: list[str]) -> dict[str, float]:
    """NAME=VALUE pairs naming EngineProfile's fields, as floats."""
    out = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in EngineProfile.model_fields:
            raise ServelabError(
                f"{pair!r}: expected NAME=VALUE with NAME a field of EngineProfile", field="param"
            )
        try:
            out[name] = float(value)
        except ValueError:
            raise ServelabError(f"{pair!r}: expected a number after '='", field="param") from None
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("engine", choices=ENGINES)
    ap.add_argument("family", help="model family (llama, qwen, gpt-oss, deepseek) or 'all'")
    ap.add_argument("params", nargs="*", help="NAME=VALUE overrides of the documented defaults")
    ap.add_argument("--system", default="h200_sxm")
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args(argv)
    try:
        over = overrides(args.params)
        got = gather(Sources(), args.system)
        cases = [c for c in got.cases if c.engine == args.engine and args.family in ("all", c.family)]
        if not cases:
            raise ServelabError(f"no {args.engine} rows of family {args.family!r}", field="family")
        price = Pricer(load_system(args.system), pick_mode("auto"))
        params = {**defaults()[args.engine], **over}
        pred = price_rows([(c, params) for c in cases], price, Jobs(workers_for(0), lambda *_: None))
    except ServelabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    measured = np.array([[c.ttft_ms, c.tpot_ms] for c in cases])
    errors, ratios = np.abs(pred - measured) / measured, pred / measured
    misses = int((errors[:, 0] > 0.5).sum())
    print(
        f"{args.engine}/{args.family}, {len(cases)} rows, defaults with {over or 'nothing'} (in sample): "
        f"TTFT {np.median(errors[:, 0]):.1%} / {np.percentile(errors[:, 0], 90):.1%} "
        f"(predicted / measured {np.median(ratios[:, 0]):.2f}; {misses} rows > 50 %), "
        f"TPOT {np.median(errors[:, 1]):.1%} / {np.percentile(errors[:, 1], 90):.1%} "
        f"(predicted / measured {np.median(ratios[:, 1]):.2f})"
    )
    if args.rows:
        for c, p in zip(cases, pred, strict=True):
            print(
                f"  {c.parallel.label():10s} c{c.concurrency:<4d} {c.isl}/{c.osl}  TTFT {c.ttft_ms:.1f} / "
                f"{p[0]:.1f} ms  TPOT {c.tpot_ms:.2f} / {p[1]:.2f} ms (measured / predicted)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
