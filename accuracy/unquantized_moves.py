"""The development points whose checkpoint keeps GEMMs out of its quantization (ModelSpec precision
`unquantized`: NVIDIA's NVFP4 DeepSeek releases), priced twice, by system, engine and model: predicted /
measured TPOT and TTFT (medians), their median |error|, and the median predicted TPOT (the decode step) in ms
(docs/accuracy.md, "NVIDIA's NVFP4 DeepSeek checkpoints keep their attention unquantized"). Only the
development part is read: held-out points are dropped before anything is printed.

    python accuracy/closed_loop.py --part dev --out before.json     # on the branch point
    python accuracy/closed_loop.py --part dev --out after.json      # with the change
    python accuracy/unquantized_moves.py before.json after.json

It also counts the other development points whose price moved (none should).
"""

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from closed_loop import DATA, SYSTEMS, read_priced, ttft_pred  # the sibling script (run from accuracy/)

from servelab.calibrate.closed_loop import read_points
from servelab.errors import ServelabError


def median_error(ratios: list[float]) -> float:
    return statistics.median(abs(r - 1) for r in ratios) * 100


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("before", type=Path, help="accuracy/closed_loop.py --out of the dev part, before")
    ap.add_argument("after", type=Path, help="the same, after")
    args = ap.parse_args(argv)
    before, after = read_priced(args.before), read_priced(args.after)
    if before is None or after is None:
        return 2
    try:
        points, _ = read_points(DATA, tuple(SYSTEMS))
    except (OSError, ValueError, ServelabError) as e:
        print(f"error: {DATA}: cannot read the closed-loop points ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    points = [p for p in points if not p.heldout]  # the development part only, before anything is printed
    groups, others = defaultdict(list), 0
    for p in points:
        b, a = before.get(p.key, {}), after.get(p.key, {})
        if "tpot_p50" not in b or "tpot_p50" not in a:
            continue  # refused by the twin
        if not p.case.model.precision.unquantized:
            others += b != a
            continue
        c = p.case
        priced = ({**b, "source": p.source}, {**a, "source": p.source})
        groups[(c.system, c.engine.value, c.model.name)].append((c, priced))
    print(f"other development points whose price moved: {others}")
    print(
        "| system, engine, model | points | TPOT pred / meas | TPOT median abs error | TTFT pred / meas "
        "| TTFT median abs error | decode step (TPOT pred), ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for key, g in sorted(groups.items()):
        tpot = [[r[i]["tpot_p50"] / c.tpot_ms for c, r in g] for i in (0, 1)]
        ttft = [[ttft_pred(r[i]) / c.ttft_ms for c, r in g] for i in (0, 1)]
        step = [statistics.median(r[i]["tpot_p50"] for _, r in g) for i in (0, 1)]
        cells = [
            f"{statistics.median(tpot[0]):.2f} -> {statistics.median(tpot[1]):.2f}",
            f"{median_error(tpot[0]):.1f} -> {median_error(tpot[1]):.1f} %",
            f"{statistics.median(ttft[0]):.2f} -> {statistics.median(ttft[1]):.2f}",
            f"{median_error(ttft[0]):.1f} -> {median_error(ttft[1]):.1f} %",
            f"{step[0]:.2f} -> {step[1]:.2f}",
        ]
        print(f"| {', '.join(key)} | {len(g)} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
