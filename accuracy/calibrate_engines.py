"""How well the engine calibration predicts measured serving: fit each engine's overheads on measured H200
rows (AIConfigurator's silicon_sample.csv by default; InferenceX result files and a results store as well,
when named), cross-validate leaving one model family out, and print the errors (defaults, fitted in sample,
unseen families; with --aic, AIConfigurator's own error on the same rows). Writes nothing but --summary:
updating a calibration file is `servelab calibrate engines --out FILE`.

    python accuracy/calibrate_engines.py --aic --jobs 0   # every core; about 8 min in one process
"""

import argparse
import sys
from pathlib import Path

from servelab.calibrate.engines import EngineFitOptions, calibrate_engines
from servelab.calibrate.sources import Sources
from servelab.errors import ServelabError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", default="h200_sxm")
    ap.add_argument("--aic", action="store_true", help="also run AIConfigurator on the same rows (cached)")
    ap.add_argument("--limit", type=int, default=0, help="at most this many rows per engine (quick runs)")
    ap.add_argument("--csv", type=Path, help="a silicon_sample.csv instead of the pinned package's")
    ap.add_argument(
        "--aic-python",
        type=Path,
        help="an environment's python with AIConfigurator (default: the [aic] extra)",
    )
    ap.add_argument("--from-store", type=Path, help="also the measured bench rows of this results store")
    ap.add_argument("--from-inferencex", type=Path, action="append", default=[], help="InferenceX results")
    ap.add_argument("--summary", type=Path, help="write the summary (errors, parameters) as JSON here")
    ap.add_argument("--jobs", type=int, default=1, help="price rows in this many processes (0: one per core)")
    args = ap.parse_args(argv)
    named = args.csv or args.from_store or args.from_inferencex
    sources = Sources(
        aic_sample=not args.csv and bool(named),
        csv=args.csv,
        aic_python=args.aic_python,
        store=args.from_store,
        inferencex=tuple(args.from_inferencex),
    )
    opts = EngineFitOptions(
        system=args.system,
        sources=sources,
        aic=args.aic,
        limit=args.limit,
        summary=args.summary,
        jobs=args.jobs,
        dry_run=True,
        program="python accuracy/calibrate_engines.py",
        argv=tuple(sys.argv[1:] if argv is None else argv),
    )
    try:
        calibrate_engines(opts, echo=lambda line: print(line, flush=True))
    except ServelabError as e:
        print(f"error: {e.flag_message()}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
