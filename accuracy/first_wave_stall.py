"""How much of a cold InferenceX row's TTFT one stall of its first wave would explain (docs/accuracy.md,
"SGLang's DeepSeek points on Blackwell").

InferenceX's client sent no warm-up before 2026-01-21 (calibrate/clients.py INFERENCEX_WARMUP_SINCE), so a
cost the server pays once, on the first forward of a kind its start-up did not run, lands on the requests
waiting then: the first wave, C of the run's N requests. A mean TTFT then exceeds the twin's (a warm
server) by S x C / N for a stall of S seconds, whatever the load and the output length; a median would not
move. For each SGLang DeepSeek-R1 point of the development part measured so on B200, this prints the first
wave's prompt tokens (C clients at the mean of InferenceX's lengths, uniform in [0.8 L, L]) against the
recipe's chunked-prefill size (with --disable-radix-cache, the only way a request has a prefix to attend is
to be cut at that size), the measured and predicted TTFT and the S the excess implies.

    python accuracy/closed_loop.py --part dev --out dev.json
    python accuracy/first_wave_stall.py --priced dev.json
"""

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from closed_loop import DATA, read_priced  # the sibling script (run from accuracy/)

from servelab.calibrate.closed_loop import Point, read_points
from servelab.calibrate.recipes import INFERENCEX_RANGE_RATIO
from servelab.engines import Engine

SYSTEM = "b200_sxm"
COLD = "inferencex-no-warmup"


@dataclass(frozen=True)
class Recipe:
    """What InferenceX's B200 SGLang DeepSeek-R1 scripts set before the warm-up, by precision."""

    chunk_tokens: int  # --chunked-prefill-size (and --max-prefill-tokens where set)
    prompts_per_client: dict[int, int]  # N / C by output length; 0: any other length


# SemiAnalysisAI/InferenceX 79abd6cb4 and 0ba7aa3ff (the scripts in use on 2025-11-10 and 2025-11-18):
# benchmarks/dsr1_fp4_b200_docker.sh `--chunked-prefill-size 16384`, benchmarks/dsr1_fp8_b200_docker.sh
# `--chunked-prefill-size 32768 --max-prefill-tokens 32768`; runners/launch_b200-nvd.sh NUM_PROMPTS: CONC x 20
# (OSL 8192) or x 50 for "deepseek-ai/DeepSeek-R1-0528", CONC x 10 for every other model, the FP4 config's
# "nvidia/DeepSeek-R1-0528-FP4-V2" included (the script matches "...-FP4" exactly)
RECIPES = {
    "fp4": Recipe(16384, {0: 10}),
    "fp8": Recipe(32768, {8192: 20, 0: 50}),
}


@dataclass(frozen=True)
class Stall:
    point: Point
    recipe: Recipe
    twin_mean_ms: float

    @property
    def first_wave_tokens(self) -> float:
        c = self.point.case
        return c.concurrency * c.isl * (1 + INFERENCEX_RANGE_RATIO) / 2

    @property
    def chunked(self) -> bool:
        return self.first_wave_tokens > self.recipe.chunk_tokens

    @property
    def excess_ms(self) -> float:
        return self.point.case.ttft_ms - self.twin_mean_ms

    @property
    def stall_s(self) -> float:
        """The one stall of the first wave that would give the excess: excess x N / C."""
        per_client = self.recipe.prompts_per_client
        return self.excess_ms / 1e3 * per_client.get(self.point.case.osl, per_client[0])


def precision_of(point: Point) -> str:
    return "fp8" if "_fp8_" in point.key else "fp4"


def stalls(points: list[Point], priced: dict) -> list[Stall]:
    """The cold SGLang DeepSeek points on B200 the priced file holds, each with its recipe and twin mean."""
    out = []
    for p in points:
        c = p.case
        if p.heldout or p.source != COLD or c.engine != Engine.SGLANG or c.system != SYSTEM:
            continue
        got = priced.get(p.key)
        if got is None or "ttft_mean" not in got:
            continue
        out.append(Stall(p, RECIPES[precision_of(p)], got["ttft_mean"]))
    return sorted(
        out,
        key=lambda s: (
            precision_of(s.point),
            s.point.case.parallel.label(),
            s.point.case.isl,
            s.point.case.osl,
            s.point.case.concurrency,
        ),
    )


def row(s: Stall) -> str:
    c = s.point.case
    cells = (
        f"{precision_of(s.point).upper()} {c.measured}",
        c.parallel.label(),
        f"{c.isl}/{c.osl}",
        str(c.concurrency),
        f"{s.first_wave_tokens:,.0f} {'>' if s.chunked else '<='}",
        f"{s.recipe.chunk_tokens:,}",
        f"{c.ttft_ms:,.0f}",
        f"{s.twin_mean_ms:,.0f}",
        f"{s.excess_ms:,.0f}",
        f"{s.stall_s:.0f}",
        f"{c.tpot_ms:.1f}",
    )
    return "| " + " | ".join(cells) + " |"


def table(found: list[Stall]) -> list[str]:
    head = (
        "precision, date",
        "parallel",
        "isl/osl",
        "clients",
        "first wave's prompt tokens",
        "chunk",
        "TTFT measured ms",
        "twin's mean ms",
        "excess ms",
        "stall S = excess x N / C (s)",
        "TPOT measured ms",
    )
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += [row(s) for s in found]
    for chunked in (True, False):
        g = np.array([s.stall_s for s in found if s.chunked == chunked])
        if len(g):
            side = "over the chunk" if chunked else "within it"
            spread = f"{g.min():.0f}-{g.max():.0f}"
            out.append(f"first wave {side}: {len(g)} points, S median {np.median(g):.0f} s ({spread})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument(
        "--priced", type=Path, required=True, help="accuracy/closed_loop.py's --out of the dev part"
    )
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args(argv)
    priced = read_priced(args.priced)
    if priced is None:
        return 2
    points, _ = read_points(args.data, (SYSTEM,))
    found = stalls(points, priced)
    if not found:
        print(f"error: --priced {args.priced}: prices no cold SGLang point of {SYSTEM}", file=sys.stderr)
        return 2
    print("\n".join(table(found)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
