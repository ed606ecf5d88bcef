"""Where the aggregated twin's TPOT goes under load: its decode steps, or the steps carrying prefill that
stall them. For the development points of one engine (tests/data/closed_loop, part == dev; a held-out point
is never read), each replayed as accuracy/closed_loop.py replays it: the measured TPOT and TTFT beside the
twin's median TPOT, its median gap between tokens (ITL: one decode step, prefill steps in between excluded),
the share of the run spent in steps that carry prefill, and its TTFT. `--what-if NAME=VALUE` (repeatable)
prices every point again with the engine's calibrated parameters NAME set to VALUE; `--launch aiconfigurator`
prices AIConfigurator's own TensorRT-LLM rows (only those) again as its config generator launched the engine
(`aiconfigurator_launch`); `--fewer-seats N` prices every point again with the engine holding N fewer requests
than the client keeps in flight (`fewer_seats`). All are probes: they write nothing and change no default.

    python accuracy/prefill_stall.py --engine sglang --systems b200_sxm,b300_sxm [--isl 1024 --osl 1024] \\
        [--only TEXT] [--what-if eager_moe_route_us=0 ...] [--json rows.json]
    python accuracy/prefill_stall.py --engine trtllm --systems h100_sxm --only qwen3_32b \\
        --launch aiconfigurator [--fewer-seats 1]

Output: a line per point (system, layout, lengths, concurrency; its measured gap between completions, `gap`),
then the measured TTFT over that gap by concurrency, then predicted / measured TPOT and TTFT by
concurrency (medians) and the median |error| of TTFT, TPOT and both with the share of TTFTs within 1.5x, as
shipped and with the probe; --json writes the rows (the point's settings and measurements, and the twin's
split under "shipped" and "what_if").
"""

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
from closed_loop import DATA, SYSTEMS, WITHIN, describe

from servelab.calibrate.closed_loop import Point, read_points
from servelab.calibrate.price import Pricer
from servelab.calibrate.recipes import RunSettings
from servelab.calibrate.rows import Case
from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.predict.engines import FITTED, MOE_TERMS, read_calibration, shipped_calibration
from servelab.predict.fit_reach import FitReach
from servelab.specs import load_system

LAUNCHES = ("aiconfigurator",)
# AIConfigurator's generator sizes an aggregated TensorRT-LLM worker's token budget for whole prompts: its
# batch, one prompt and this many tokens more
AIC_BUDGET_SPARE = 1500
AIC_KV_SHARE = 0.80  # its templates' kv_cache_config.free_gpu_memory_fraction


def what_if(text: str) -> tuple[str, float]:
    """NAME=VALUE as (name, value); a ServelabError naming --what-if unless NAME is a fitted parameter and
    VALUE a number >= 0."""
    name, _, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if name not in FITTED or number < 0:
        raise ServelabError(
            f"--what-if: expected NAME=VALUE, NAME one of {', '.join(FITTED)} and VALUE >= 0, got {text!r}",
            field="what-if",
        )
    return name, number


def aiconfigurator_launch(case: Case) -> Case:
    """The case launched as AIConfigurator's config generator launches an aggregated TensorRT-LLM worker:
    chunked prefill off, max_batch_size the batch, max_num_tokens the batch + ISL + 1,500 ("we're assuming no
    chunked prefill"; ai-dynamo/aiconfigurator 9610283, the August 2025 generator its eval ran,
    src/aiconfigurator/cli/backends/trtllm.py and templates/trtllm/dynamo/extra_engine_args.1.0.0rc3.yaml.j2,
    where enable_chunked_prefill defaults to false and free_gpu_memory_fraction to 0.80; the same rules in
    generator/rule_plugin/trtllm.rule of January 2026), CUDA graphs for every batch up to it. The batch is
    the row's concurrency: every AIConfigurator TensorRT-LLM row on H100 has batch_size equal to it."""
    batch = case.concurrency
    settings = case.settings or RunSettings(recipe="AIConfigurator's benchmark")
    launched = replace(
        settings,
        recipe=f"{settings.recipe}, AIConfigurator's generator launch",
        chunked_prefill=False,
        max_num_batched_tokens=batch + case.isl + AIC_BUDGET_SPARE,
        max_num_seqs=batch,
        cuda_graph_max_batch=batch,
        memory_share=AIC_KV_SHARE,
    )
    return replace(case, settings=launched)


def fewer_seats(case: Case, seats: int) -> Case:
    """The case with the engine holding `seats` fewer requests than the client keeps in flight: max_batch_size
    (max_num_seqs) the concurrency less `seats`, so that in a closed loop `seats` requests always wait for
    another to finish. A probe of what AIConfigurator's TensorRT-LLM Llama-3.1-8B rows on H100 look like
    (docs/accuracy.md, "TensorRT-LLM's Llama-3.1-8B points on H100"), not a rule of any engine: a
    ServelabError naming --fewer-seats where no seat would be left."""
    seats_left = case.concurrency - seats
    if seats_left < 1:
        raise ServelabError(
            f"--fewer-seats: expected fewer than the point's {case.concurrency} clients, got {seats}",
            field="fewer-seats",
        )
    settings = case.settings or RunSettings(recipe="the replay's client")
    return replace(case, settings=replace(settings, max_num_seqs=seats_left))


def gap_ms(row: dict) -> float:
    """The closed loop's measured mean gap between completions (ms): a client's cycle, TTFT + (OSL - 1) x
    TPOT, over the clients. A request that has to wait for another to finish before the engine takes it
    waits about this long."""
    cycle = row["ttft_ms"] + (row["osl"] - 1) * row["tpot_ms"]
    return float(cycle / row["concurrency"])


def probe_rule(launch: Callable[[Case], Case] | None, seats: int) -> Callable[[Case], Case] | None:
    """The launch (if any), then `seats` fewer seats (if any): the settings a probe prices each case with."""
    if not seats:
        return launch

    def rule(case: Case) -> Case:
        return fewer_seats(launch(case) if launch else case, seats)

    return rule


def launch_rule(name: str | None, engine: str) -> Callable[[Case], Case] | None:
    """The launch --launch names (None: none); a ServelabError naming --launch for another name, or for an
    engine other than TensorRT-LLM."""
    if name is None:
        return None
    if name not in LAUNCHES or engine != Engine.TRTLLM.value:
        raise ServelabError(
            f"--launch: expected one of {', '.join(LAUNCHES)} with --engine trtllm, got {name!r} with "
            f"--engine {engine}"
        )
    return aiconfigurator_launch


class TwinSplit:
    """The twin's answer for a point, split: median TPOT, median ITL, prefill share of the run, mean and
    median TTFT (ms); `launch` (if any) changes each case's settings before it is priced."""

    def __init__(
        self,
        params: dict[str, float],
        launch: Callable[[Case], Case] | None = None,
        moe_fits: dict[str, FitReach] | None = None,
    ):
        self.params, self.launch, self.moe_fits = params, launch, moe_fits
        self.pricers: dict[str, Pricer] = {}

    def __call__(self, case: Case) -> dict[str, float]:
        if self.launch is not None:
            case = self.launch(case)
        pricer = self.pricers.get(case.system)
        if pricer is None:
            system = load_system(case.system)
            pricer = self.pricers[case.system] = Pricer(system, "aggregated", moe_fits=self.moe_fits)
        est = pricer.estimate(case, self.params)
        p = est.percentiles
        return {
            "tpot": p["tpot_ms"]["p50"],
            "itl": p["itl_ms"]["p50"],
            "prefill_share": est.scheduler["time_in_prefill_steps"],
            "ttft_mean": p["ttft_ms"]["mean"],
            "ttft_p50": p["ttft_ms"]["p50"],
        }


def development_points(engine: str, systems: tuple[str, ...], args: argparse.Namespace) -> list[Point]:
    """The development points of `engine` on `systems` with the lengths and id text asked for."""
    points, _ = read_points(DATA, systems)
    return [
        p
        for p in points
        if not p.heldout
        and p.case.engine.value == engine
        and (args.isl is None or p.case.isl == args.isl)
        and (args.osl is None or p.case.osl == args.osl)
        and (not args.only or args.only in p.key)
        and (not args.launch or p.source == args.launch)
    ]


def point_line(row: dict, got: dict, alt: dict | None) -> str:
    line = (
        f"{row['system']:9s} {row['parallel']:8s} {row['isl']}/{row['osl']:<5d} c{row['concurrency']:<4d} "
        f"gap {row['gap_ms']:6,.0f} TPOT {row['tpot_ms']:6.1f} meas, twin {got['tpot']:6.1f} = "
        f"ITL {got['itl']:5.1f} with "
        f"{got['prefill_share']:4.0%} in prefill steps; TTFT {row['ttft_ms']:7,.0f} meas, "
        f"twin {got['ttft_mean']:7,.0f}"
    )
    if alt is not None:
        line += (
            f" | what-if TPOT {alt['tpot']:6.1f} ({alt['prefill_share']:4.0%}), TTFT {alt['ttft_mean']:7,.0f}"
        )
    return line


def by_concurrency(rows: list[dict], key: str) -> str:
    """Median predicted / measured TPOT and TTFT (the twin's mean, as closed_loop.py compares silicon rows) by
    concurrency, for the answers under `key`."""
    groups: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r["concurrency"]].append(r)
    parts = []
    for c in sorted(groups):
        g = groups[c]
        tpot = np.median([r[key]["tpot"] / r["tpot_ms"] for r in g])
        ttft = np.median([r[key]["ttft_mean"] / r["ttft_ms"] for r in g])
        parts.append(f"c{c} ({len(g)}): TPOT {tpot:.2f}, TTFT {ttft:.2f}")
    return "; ".join(parts)


def ttft_over_gap(rows: list[dict]) -> str:
    """The measured TTFT over the measured gap between completions, medians by concurrency: near 1 and above
    where each new request waits for another to finish, near 0 where it is taken at once."""
    groups: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        groups[r["concurrency"]].append(r["ttft_ms"] / r["gap_ms"])
    return "; ".join(f"c{c}: {np.median(groups[c]):.2f}" for c in sorted(groups))


def errors(rows: list[dict], key: str) -> str:
    """Median |predicted / measured - 1| of TTFT (the twin's mean), TPOT and the two together, and the share
    of TTFTs within 1.5x either way, for the answers under `key`."""
    ttft = np.array([r[key]["ttft_mean"] / r["ttft_ms"] for r in rows])
    tpot = np.array([r[key]["tpot"] / r["tpot_ms"] for r in rows])
    both = np.concatenate([ttft, tpot])
    within = np.mean((ttft <= WITHIN) & (ttft >= 1 / WITHIN))
    return (
        f"median |error| both {np.median(np.abs(both - 1)):.1%}, TTFT {np.median(np.abs(ttft - 1)):.1%}, "
        f"TPOT {np.median(np.abs(tpot - 1)):.1%}; TTFT within {WITHIN}x on {within:.0%}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--engine", default="sglang")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--isl", type=int)
    ap.add_argument("--osl", type=int)
    ap.add_argument("--calibration", type=Path, default=shipped_calibration())
    ap.add_argument("--only", help="only points whose id contains this text")
    ap.add_argument(
        "--what-if",
        action="append",
        default=[],
        help="NAME=VALUE: a calibrated parameter of the engine set to VALUE (repeatable)",
    )
    ap.add_argument(
        "--launch", help="aiconfigurator: its own rows only, the probe launched as its generator launches"
    )
    ap.add_argument(
        "--fewer-seats",
        type=int,
        default=0,
        help="N: the probe's engine holds N fewer requests than the clients (max_batch_size = clients - N)",
    )
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    try:
        changes = dict(what_if(text) for text in args.what_if)
        if args.fewer_seats < 0:
            raise ServelabError(f"--fewer-seats: expected a count >= 0, got {args.fewer_seats}")
        launch = probe_rule(launch_rule(args.launch, args.engine), args.fewer_seats)
        calibration = read_calibration(args.calibration)
        engines = calibration.engines
        if args.engine not in engines:
            raise ServelabError(
                f"--engine: expected one the calibration fits ({', '.join(sorted(engines))}), "
                f"got {args.engine!r}",
                field="engine",
            )
        params = dict(engines[args.engine].params)
        points = development_points(args.engine, tuple(args.systems.split(",")), args)
    except ServelabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # the fitted MoE terms where the fit's rows reach, as for a user; set by a what-if, wherever they are
    fits = calibration.moe_fits()
    shipped = TwinSplit(params, moe_fits=fits)
    by_hand = any(t in changes for t in MOE_TERMS)
    probe = TwinSplit({**params, **changes}, launch, None if by_hand else fits) if changes or launch else None
    rows = []
    for p in sorted(points, key=lambda p: (p.case.system, p.case.parallel.label(), p.case.isl, p.case.osl)):
        try:
            row = {**describe(p), "shipped": shipped(p.case), "what_if": probe(p.case) if probe else None}
            row["gap_ms"] = gap_ms(row)
        except ServelabError as e:
            print(f"refused {p.key}: {e}", file=sys.stderr)
            continue
        rows.append(row)
        print(point_line(row, row["shipped"], row["what_if"]))
    print(f"\n{len(rows)} development points, {args.engine}; predicted / measured by concurrency (medians)")
    if not rows:
        return 0
    print(f"measured TTFT / gap between completions by concurrency (medians): {ttft_over_gap(rows)}")
    print(f"shipped: {by_concurrency(rows, 'shipped')}")
    print(f"shipped: {errors(rows, 'shipped')}")
    if probe:
        parts = [f"{k}={v:g}" for k, v in changes.items()]
        if args.launch:
            parts.append(f"{args.launch}'s launch")
        if args.fewer_seats:
            parts.append(f"{args.fewer_seats} seat(s) fewer")
        label = ", ".join(parts)
        print(f"{label}: {by_concurrency(rows, 'what_if')}")
        print(f"{label}: {errors(rows, 'what_if')}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
