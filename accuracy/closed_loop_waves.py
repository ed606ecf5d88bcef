"""Where InferenceX's MiniMax-M2.5 token-position TTFTs come from (development part only): what the pinned
files measured, read as a closed loop of C clients, beside main's twin on the same points.

    python accuracy/closed_loop_waves.py                    # TEP8 development points, shipped calibration
    python accuracy/closed_loop_waves.py --what-if 3        # every kernel priced 3x (a probe, not a fit)

Per point (measured): p99 / p50 TTFT (a queue where every client waits behind the others of its wave: TTFT
uniform in [0, W], p99 / p50 near 2); `slot` = p99 TTFT / C, the server time per request the first-token
queue implies; `X` = requests / duration, the server's measured throughput. Twin: a single prompt's
prefill (static, batch 1), its median and p99 TTFT, median TPOT and throughput as the closed-loop replay of
accuracy/closed_loop.py prices them. --what-if K prices every kernel family K times slower
(calibrate.price.ScaledDB): whether a slower prefill alone makes the twin's first-token queue; --budget N
replays with N tokens a step (vLLM's max_num_batched_tokens; its default is 8192): whether a smaller
prefill chunk a step makes it; --api-prompt-token-us U replays with the API server's serial CPU per prompt
token set to U (vLLM's profile says 1; accuracy/prompt_intake_cost.py measures it): whether a serial prompt
intake makes it. All are probes of the twin's structure, never written into a profile.
"""

import argparse
import json
from dataclasses import replace
from pathlib import Path

from servelab.calibrate.closed_loop import read_points
from servelab.calibrate.params import KERNEL_TERMS
from servelab.calibrate.price import Pricer
from servelab.engines import Engine
from servelab.predict.engines import read_calibration, shipped_calibration
from servelab.specs import load_system

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "closed_loop"


class IntakeProbe(Pricer):
    """A Pricer whose engine profiles carry another API-server CPU per prompt token (a probe)."""

    def __init__(self, system, mode: str, api_prompt_token_us: float):
        super().__init__(system, mode)
        self.api_prompt_token_us = api_prompt_token_us

    def _setup(self, case, params):
        model, isl, osl, spread, engine, share = super()._setup(case, params)
        engine = engine.model_copy(update={"api_prompt_token_us": self.api_prompt_token_us})
        return model, isl, osl, spread, engine, share


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--split", default="tep8", choices=("tep8", "dep8"))
    ap.add_argument("--what-if", type=float, default=1.0, help="every kernel family priced this many times")
    ap.add_argument("--isl", type=int, help="only this prompt length")
    ap.add_argument(
        "--budget", type=int, help="a probe: the twin's step token budget (max_num_batched_tokens)"
    )
    ap.add_argument(
        "--api-prompt-token-us", type=float, help="a probe: the API server's serial CPU per prompt token (us)"
    )
    args = ap.parse_args(argv)
    points, _ = read_points(DATA, ("h200_sxm",))
    mine = [
        p
        for p in points
        if p.source == "inferencex-token-position"
        and not p.heldout  # development part only
        and f"_{args.split}_" in p.key
        and (args.isl is None or p.case.isl == args.isl)
    ]
    mine.sort(key=lambda p: (p.case.isl, p.case.concurrency))
    fitted = read_calibration(shipped_calibration()).engines.get(Engine.VLLM)
    params = dict(fitted.params) if fitted is not None else {}
    if args.what_if != 1.0:
        params.update({name: args.what_if for name in KERNEL_TERMS})
    system = load_system("h200_sxm")
    closed = (
        Pricer(system, "aggregated")
        if args.api_prompt_token_us is None
        else IntakeProbe(system, "aggregated", args.api_prompt_token_us)
    )
    single = Pricer(system, "static")
    print(
        f"{'isl':>6s} {'C':>3s} | measured: {'p50':>6s} {'p99':>6s} {'p99/50':>6s} {'slot':>5s} {'TPOT':>5s}"
        f" {'X':>5s} | twin: {'prefill':>7s} {'p50':>6s} {'p99':>6s} {'TPOT':>5s} {'X':>5s}"
    )
    for p in mine:
        c = p.case
        if args.budget and c.settings is not None:
            c = replace(c, settings=replace(c.settings, max_num_batched_tokens=args.budget))
        raw = json.loads((DATA / "inferencex" / "results" / p.key).read_text())
        x = raw["completed"] / raw["duration"]
        p99 = p.ttft_p99_ms or 0.0
        one = single(replace(c, concurrency=1), params)[0]
        agg = closed.estimate(c, params)
        t = agg.percentiles["ttft_ms"]
        print(
            f"{c.isl:6d} {c.concurrency:3d} | {'':9s} {c.ttft_ms / 1e3:6.2f} {p99 / 1e3:6.2f} "
            f"{p99 / c.ttft_ms:6.2f} {p99 / 1e3 / c.concurrency:5.2f} {c.tpot_ms:5.1f} {x:5.2f} | {'':5s} "
            f"{one / 1e3:7.3f} {t['p50'] / 1e3:6.2f} {t['p99'] / 1e3:6.2f} "
            f"{agg.percentiles['tpot_ms']['p50']:5.1f} {agg.request_throughput:5.2f}"
        )
    print("seconds, except TPOT (ms) and X (requests / s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
