"""Write everything a fixed set of simulations leaves, one line per value, so two checkouts of the serving
simulator can be compared exactly (`cmp A B`) before and after a change that must not alter answers.

    PYTHONPATH=OTHER/src python scripts/sim_fingerprint.py /tmp/before.txt
    PYTHONPATH=$PWD/src python scripts/sim_fingerprint.py /tmp/after.txt && cmp /tmp/before.txt /tmp/after.txt

Each case runs `simulate` with the kept simulations off and writes the `repr` (every digit of every float) of
the result's throughputs and latency samples, the nominal run's lane statistics and ITL samples, every
request's fields and clocks, the lane's counters, the measuring window and each reported distribution. The
cases cover the three engines' policies in closed and open (bursty) loops with varied lengths, prefix hits,
KV-bound lanes that preempt thousands of times, one output token, prefilled decode workers (joining or
recomputing one token), pipeline parallel, DeepSeek-V3 with and without attention DP (and fewer clients than
ranks), speculative decoding, no chunked prefill and small token budgets; then the twin's replays (closed
with a concurrency limit, open with and without one, over one and two lanes).
"""

from __future__ import annotations

import argparse
import os
import random
from dataclasses import fields
from typing import IO

from servelab.perfdb import price_cache
from servelab.perfdb.db import perfdb_for
from servelab.predict import twin
from servelab.predict.engines import engine_profile
from servelab.predict.serving import StepPricer, Workload, simulate
from servelab.predict.serving.aggregated import METRICS, lane_limits
from servelab.predict.serving.engine import Request
from servelab.predict.serving.workload import SpecDecoding
from servelab.predict.static import prepare
from servelab.specs import Parallel, load_model, load_system

QWEN, DSV3 = "qwen3-32b", "deepseek-v3"
TP2, TP8, DP8 = Parallel(tp=2), Parallel(tp=8, ep=8), Parallel(tp=8, ep=8, dp_attn=True)
ONE_DRAFT = SpecDecoding(draft_tokens=1, acceptance=0.8)


def cases() -> list[tuple[str, str, str, Parallel, str, Workload, dict]]:
    """(name, model, system, parallel, engine, workload, options: prefilled, gpu_memory_utilization and
    engine overrides)."""
    out = []
    for eng in ("vllm", "sglang", "trtllm"):
        out += [
            (
                f"{eng} closed c64",
                QWEN,
                "h200_sxm",
                TP2,
                eng,
                Workload(isl=1000, osl=200, concurrency=64, num_requests=1000),
                {},
            ),
            (
                f"{eng} closed c8, fixed lengths",
                QWEN,
                "h200_sxm",
                TP2,
                eng,
                Workload(isl=3000, osl=500, concurrency=8, num_requests=100, range_ratio=0.0),
                {},
            ),
            (
                f"{eng} open 15/s",
                QWEN,
                "h200_sxm",
                TP2,
                eng,
                Workload(isl=1000, osl=200, rate=15, num_requests=300),
                {},
            ),
            (
                f"{eng} open bursty",
                QWEN,
                "h200_sxm",
                TP2,
                eng,
                Workload(isl=2000, osl=300, rate=8, burstiness=0.5, num_requests=200),
                {},
            ),
            (
                f"{eng} prefix hits",
                QWEN,
                "h200_sxm",
                TP2,
                eng,
                Workload(isl=4000, osl=300, concurrency=32, num_requests=300, prefix_hit_rate=0.6),
                {},
            ),
            (
                f"{eng} KV-bound",
                QWEN,
                "h100_sxm",
                TP2,
                eng,
                Workload(isl=8000, osl=2000, concurrency=256, num_requests=400),
                {"gpu_memory_utilization": 0.5},
            ),
            (
                f"{eng} one output token",
                QWEN,
                "h200_sxm",
                TP2,
                eng,
                Workload(isl=1000, osl=1, concurrency=32, num_requests=300),
                {},
            ),
            (
                f"{eng} prefilled",
                QWEN,
                "h200_sxm",
                TP2,
                eng,
                Workload(isl=2000, osl=300, concurrency=64, num_requests=300),
                {"prefilled": True},
            ),
            (
                f"{eng} pp2",
                QWEN,
                "h200_sxm",
                Parallel(tp=2, pp=2),
                eng,
                Workload(isl=1000, osl=200, concurrency=64, num_requests=300),
                {},
            ),
            (
                f"{eng} DeepSeek-V3 tp8",
                DSV3,
                "h200_sxm",
                TP8,
                eng,
                Workload(isl=2000, osl=500, concurrency=128, num_requests=300),
                {},
            ),
            (
                f"{eng} DeepSeek-V3 dp8",
                DSV3,
                "h200_sxm",
                DP8,
                eng,
                Workload(isl=2000, osl=500, concurrency=256, num_requests=400),
                {},
            ),
            (
                f"{eng} DeepSeek-V3 dp8, 5 clients",
                DSV3,
                "h200_sxm",
                DP8,
                eng,
                Workload(isl=2000, osl=500, concurrency=5, num_requests=40),
                {},
            ),
            (
                f"{eng} speculative",
                DSV3,
                "h200_sxm",
                TP8,
                eng,
                Workload(
                    isl=1000, osl=400, concurrency=64, num_requests=300, spec=SpecDecoding(draft_tokens=3)
                ),
                {},
            ),
            (
                f"{eng} open speculative dp8",
                DSV3,
                "h200_sxm",
                DP8,
                eng,
                Workload(isl=1000, osl=400, rate=20, num_requests=300, spec=ONE_DRAFT),
                {},
            ),
        ]
    long = Workload(isl=3000, osl=200, concurrency=64, num_requests=300)
    out += [
        ("vllm no chunked prefill", QWEN, "h200_sxm", TP2, "vllm", long, {"chunked_prefill": False}),
        ("vllm budget 1024", QWEN, "h200_sxm", TP2, "vllm", long, {"max_num_batched_tokens": 1024}),
        ("sglang budget 1024", QWEN, "h200_sxm", TP2, "sglang", long, {"max_num_batched_tokens": 1024}),
    ]
    return out


def request_fields(req: Request) -> str:
    return repr([getattr(req, f.name) for f in fields(req)])


def write_case(
    out: IO[str],
    name: str,
    model_name: str,
    system_name: str,
    parallel: Parallel,
    eng: str,
    wl: Workload,
    options: dict,
) -> None:
    prefilled = options.pop("prefilled", False)
    memory_share = options.pop("gpu_memory_utilization", None)
    engine = engine_profile(eng, **options)
    system = load_system(system_name)
    model = engine.model_as_served(load_model(model_name))
    mem = prepare(model, system, parallel, engine.max_num_batched_tokens, memory_share, **engine.kv_rule)
    ranks = min(wl.clients, parallel.attn_dp) if wl.closed else 0
    db = perfdb_for(system, engine.name)
    pricer = StepPricer(model, parallel, engine, db, spec_tokens=wl.spec.draft_tokens, ranks=ranks)
    watched: list = []
    sim = simulate(
        model, parallel, engine, mem, wl, pricer, prefilled=prefilled, watch=lambda *run: watched.append(run)
    )
    lane, source = watched[0]
    out.write(f"== {name}\n")
    out.write(repr((sim.output_tps, sim.request_tps, sim.requests, sim.kv_max_sequences, sim.samples)) + "\n")
    out.write(repr(sim.stats) + "\n")
    for req in source.requests:
        out.write(request_fields(req) + "\n")
    counters = (lane.clock, lane.G, lane.emitted, lane.completed, lane.sum_ctx0, lane.sum_target)
    counters += (lane.num_decoding, lane.prefill_tokens, lane.frontend_free, lane.decode_rate, lane.arrived)
    out.write(repr((source.window, counters, lane.peak_kv_bytes, pricer.priced)) + "\n")
    for metric in METRICS:
        out.write(repr([sim.distribution(metric, clock) for clock in range(3)]) + "\n")


def write_replays(out: IO[str]) -> None:
    engine, system, model = engine_profile("vllm"), load_system("h200_sxm"), load_model(QWEN)
    mem = prepare(model, system, TP2, engine.max_num_batched_tokens, None, **engine.kv_rule)
    rng = random.Random(3)
    specs = []
    for _ in range(200):
        prompt = rng.randint(200, 3000)
        specs.append((prompt, rng.randint(1, 400), min(rng.choice([0, 0, 128, 1024]), prompt - 1)))
    limits = lane_limits(model, TP2, engine, mem, Workload(isl=3000, osl=400, concurrency=1))
    for closed, limit in ((True, 16), (False, None), (False, 8)):
        pricer = StepPricer(model, TP2, engine, perfdb_for(system, engine.name))
        offsets = [0.0] * len(specs) if closed else [i * 0.05 for i in range(len(specs))]
        lanes = twin.route(len(specs), limit, TP2)
        per_clock, itl, steps = twin.replay(specs, offsets, lanes, limits, engine.policy, pricer, closed)
        out.write(f"== replay closed={closed} limit={limit}\n{steps} {itl!r}\n")
        for clock, reqs in per_clock.items():
            for req in reqs:
                out.write(f"{clock} {request_fields(req)}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the file to write")
    parser.add_argument("--only", default="", help="run only the cases whose name holds this text")
    args = parser.parse_args()
    os.environ[price_cache.ENV_SWITCH] = "0"  # simulations run, not read back (servelab.predict.serving.kept)
    with open(args.out, "w") as out:
        for name, model, system, parallel, eng, wl, options in cases():
            if args.only in name:
                write_case(out, name, model, system, parallel, eng, wl, dict(options))
        if args.only in "replay":
            write_replays(out)


if __name__ == "__main__":
    main()
