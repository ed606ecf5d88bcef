"""One group's development points, one a line: measured against the twin's TTFT and TPOT, and the TTFT the
twin misses in ms (docs/accuracy.md, "vLLM's Llama points on B200"). Only the development part is read:
held-out points are dropped before anything is printed.

    python accuracy/closed_loop.py --part dev --out dev.json
    python accuracy/group_points.py --priced dev.json --system b200_sxm --engine vllm --family llama

Columns: tp, input / output tokens, clients, the checkpoint's weights, measured TTFT and the twin's (its mean
for a silicon row, its median for a token-position file: accuracy/closed_loop.py ttft_pred), their ratio and
difference, measured / predicted TPOT.
"""

import argparse
import sys
from pathlib import Path

from closed_loop import DATA, read_priced, ttft_pred  # the sibling script (run from accuracy/)

from servelab.calibrate.closed_loop import read_points
from servelab.errors import ServelabError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument(
        "--priced", type=Path, required=True, help="accuracy/closed_loop.py --out of the dev part"
    )
    ap.add_argument("--system", required=True)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--family", required=True)
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args(argv)
    priced = read_priced(args.priced)
    if priced is None:
        return 2
    try:
        points, _ = read_points(args.data, (args.system,))
    except (OSError, ValueError, ServelabError) as e:
        what = "a folder of pinned closed-loop data (tests/data/closed_loop's layout)"
        print(f"error: --data {args.data}: expected {what} ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    points = [p for p in points if not p.heldout]  # the development part only, before anything is printed
    group = [p for p in points if p.case.engine.value == args.engine and p.case.family == args.family]
    group.sort(
        key=lambda p: (
            p.case.parallel.tp,
            p.case.isl,
            p.case.osl,
            str(p.case.model.precision.weights),
            p.case.concurrency,
        )
    )
    print("tp   isl/osl    C  weights  TTFT meas  pred ms  meas/pred  meas-pred ms  TPOT meas/pred")
    for p in group:
        got = priced.get(p.key)
        if not got or "refused" in got:
            continue
        c = p.case
        pred = ttft_pred({**got, "source": p.source})
        weights = c.model.precision.weights.value
        print(
            f"{c.parallel.tp:<3d} {c.isl:>4d}/{c.osl:<4d} {c.concurrency:>3d}  {weights:7s}"
            f"  {c.ttft_ms:9.1f}  {pred:7.1f}  {c.ttft_ms / pred:9.2f}  {c.ttft_ms - pred:12.1f}"
            f"  {c.tpot_ms / got['tpot_p50']:14.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
