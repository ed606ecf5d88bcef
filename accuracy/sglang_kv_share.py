"""Development closed-loop points replayed with SGLang's `mem_fraction_static` set, as the closed-loop replay
prices them otherwise (the shipped calibration, AIConfigurator's client): how small a KV cache the measured
TTFT and TPOT ask for. A probe: it changes no rule. Only the development part is read.

    python accuracy/sglang_kv_share.py --systems h100_sxm --tp 1 --shares 0.80,0.79,0.785,0.78
"""

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from bad_input import one_line_on_bad_input  # this folder's rule for bad input

from servelab.calibrate.closed_loop import read_points
from servelab.calibrate.price import Pricer, defaults
from servelab.calibrate.recipes import RunSettings
from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.predict.engines import read_calibration, shipped_calibration
from servelab.specs import load_system

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "closed_loop"


def shares_of(text: str) -> list[float]:
    try:
        shares = [float(s) for s in text.split(",")]
    except ValueError:
        raise ServelabError(f"--shares: expected fractions separated by commas, got {text!r}") from None
    if not all(0 < s < 1 for s in shares):
        raise ServelabError(f"--shares: each must lie in (0, 1), got {text!r}")
    return shares


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--systems", default="h100_sxm")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--shares", default="0.80,0.79,0.785,0.78", help="mem_fraction_static values to try")
    args = ap.parse_args(argv)
    return one_line_on_bad_input(lambda: report(args))


def report(args: argparse.Namespace) -> int:
    """The report for parsed arguments; a ServelabError for bad input."""
    shares = shares_of(args.shares)
    systems = tuple(args.systems.split(","))
    points, _ = read_points(DATA, systems)
    cases = [
        p.case
        for p in points
        if not p.heldout and p.case.engine == Engine.SGLANG and p.case.parallel.tp == args.tp
    ]
    if not cases:
        raise ServelabError(f"no SGLang development point at tp {args.tp} on {args.systems}")
    params = dict(defaults()[Engine.SGLANG])
    fit = read_calibration(shipped_calibration()).engines.get(Engine.SGLANG)
    params.update(fit.params if fit is not None else {})
    pricers = {name: Pricer(load_system(name), "aggregated") for name in systems}
    for share in (None, *shares):
        print(f"mem_fraction_static {'SGLang default' if share is None else share}")
        for case in cases:
            if share is not None:
                case = replace(case, settings=replace(case.settings or RunSettings(), memory_share=share))
            est = pricers[case.system].estimate(case, params)
            print(
                f"  {case.system} {case.parallel.label()} {case.isl}/{case.osl} c{case.concurrency}: "
                f"TTFT {est.ttft_ms / 1e3:6.1f} s (measured {case.ttft_ms / 1e3:5.1f}), "
                f"TPOT {est.tpot_ms:5.1f} ms (measured {case.tpot_ms:5.1f})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
