"""One given disaggregated split (x prefill workers of one parallel layout, y decode workers of another) at
one concurrency, priced as the planner prices its disaggregated points (plan/disagg.py).

The planner keeps only the points whose prefill pool keeps up with the decode pool. A given split runs either
way:
- decode-bound: the prefill pool keeps up; disagg.price_split prices it (the planner's own function).
- prefill-bound: the prefill workers, saturated, set the request rate R = x * (one worker's saturated rate).
  The decode workers then hold only what that rate feeds them (R / y times a request's time in decode,
  found by a few fixed-point steps, never more than the clients), and the other clients wait in the prefill
  queue: by Little's law every request spends C / R in the system, so TTFT = C / R - (OSL - 1) x TPOT.

Both are the steady state. A benchmark of N prompts started on an idle deployment (`num_prompts`) also
counts its first wave: the C clients send together, so the prefill pool takes C prompts at once
(first_wave_ms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from servelab.errors import ServelabError
from servelab.perfdb.db import perfdb_for
from servelab.predict.engines import EngineProfile
from servelab.predict.plan.configs import make_config
from servelab.predict.plan.context import SearchContext
from servelab.predict.plan.disagg import (
    DecodeLoad,
    PrefillPool,
    decode_load,
    decode_worker,
    kv_transfer_s,
    price_split,
)
from servelab.predict.plan.points import DisaggDetail, EngineConfig, Point, clocks
from servelab.predict.plan.request import PlanRequest
from servelab.predict.serving.workload import SpecDecoding
from servelab.specs import ModelSpec, Parallel, SystemSpec
from servelab.traffic.lengths import SIMULATOR_RANGE_RATIO

Bound = Literal["decode", "prefill"]
FIXED_POINT_STEPS = 4  # decode in-flight count under a prefill-bound rate: settles within a few steps


@dataclass(frozen=True)
class Split:
    """The two pools of a disaggregated deployment."""

    prefill: Parallel
    prefill_workers: int
    decode: Parallel
    decode_workers: int

    @property
    def gpus(self) -> int:
        return self.prefill_workers * self.prefill.gpus + self.decode_workers * self.decode.gpus

    def label(self) -> str:
        return (
            f"{self.prefill_workers}x {self.prefill.label()} | {self.decode_workers}x {self.decode.label()}"
        )


@dataclass(frozen=True)
class SplitPoint:
    """The priced split: the planner's Point (its TTFT, TPOT and pools), which pool binds, and the TTFT's
    parts in ms (prefill queue + prefill, KV transfer, the decode worker's first step)."""

    point: Point
    bound: Bound
    clients: int  # the concurrency asked for (the decode workers may hold fewer when prefill binds)
    request_rate: float  # requests/s the deployment serves
    prefill_capacity: float  # requests/s the prefill pool sustains saturated
    prefill_ms: float
    transfer_ms: float
    first_step_ms: float


def split_context(
    model: ModelSpec,
    system: SystemSpec,
    engine: EngineProfile,
    split: Split,
    isl: int,
    osl: int,
    range_ratio: float = SIMULATOR_RANGE_RATIO,
) -> SearchContext:
    """The planner's search context for one split, without latency limits (an estimate, not a search);
    `range_ratio`: the clients' length spread around `isl` and `osl` (Workload.range_ratio)."""
    req = PlanRequest(
        model=model.name,
        system=system.name,
        gpus=split.gpus,
        isl=isl,
        osl=osl,
        ttft_ms=None,
        tpot_ms=None,
        backend=engine.name,
        mode="disagg",
    )
    db = perfdb_for(system, engine.name)
    return SearchContext(req, model, system, engine, db, SpecDecoding(), range_ratio=range_ratio)


def pool_config(ctx: SearchContext, parallel: Parallel, pool: str) -> EngineConfig:
    """The engine config of one pool's worker; a one-line error naming the pool when it cannot serve."""
    try:
        parallel.validate(ctx.model)
    except ServelabError as e:
        raise ServelabError(f"{pool} pool: {e.message}", field=f"{pool}_tp") from None
    ctx.dropped.clear()
    cfg = make_config(ctx, parallel)
    if cfg is None:
        raise ServelabError(f"{pool} pool {ctx.dropped[-1]}", field=f"{pool}_tp")
    return cfg


def price_given_split(
    ctx: SearchContext, split: Split, concurrency: int, num_prompts: int | None = None
) -> SplitPoint:
    """`concurrency` clients on the split (spread evenly over the decode workers): the steady state, or with
    `num_prompts` a benchmark of that many prompts from an idle deployment, every one counted."""
    if concurrency < 1:
        raise ServelabError(f"concurrency must be at least 1, got {concurrency}", field="batch")
    if num_prompts is not None and num_prompts < 1:
        raise ServelabError(f"num_prompts must be at least 1, got {num_prompts}", field="num_prompts")
    pcfg = pool_config(ctx, split.prefill, "prefill")
    dcfg = decode_worker(ctx, pool_config(ctx, split.decode, "decode"))
    pool = PrefillPool(ctx, pcfg)
    x, y = split.prefill_workers, split.decode_workers
    per_worker = max(1, round(concurrency / y))
    load = decode_load(ctx, dcfg, per_worker)
    pt = price_split(ctx, pool, x, dcfg, y, load)
    if pt is not None and pt.disagg is not None:
        d = pt.disagg
        if num_prompts is not None:
            pt, d = _from_idle(pt, d, pool, x, load, min(concurrency, num_prompts), num_prompts)
        return SplitPoint(
            pt,
            "decode",
            concurrency,
            pt.request_rate,
            x * pool.capacity,
            d.prefill_ttft_ms,
            d.kv_transfer_ms,
            load.first[0],
        )
    return _prefill_bound(ctx, pool, split, dcfg, concurrency, per_worker, load)


def _from_idle(
    pt: Point, d: DisaggDetail, pool: PrefillPool, x: int, load: DecodeLoad, first: int, counted: int
) -> tuple[Point, DisaggDetail]:
    """The decode-bound point as a benchmark from an idle deployment measures it: the first `first` prompts
    arrive together, and their excess prefill time over the steady state is averaged over all `counted`."""
    ttft, transfer, rates = pt.ttft, d.kv_transfer_ms, pool.saturated.request_tps
    steady = clocks(lambda k: ttft[k] - transfer - load.first[k])  # the steady state's prefill part
    extra = clocks(lambda k: (first_wave_ms(first, x, rates[k], steady[k]) - steady[k]) * first / counted)
    detail = replace(d, prefill_ttft_ms=d.prefill_ttft_ms + extra[0])
    return replace(pt, ttft=clocks(lambda k: ttft[k] + extra[k]), disagg=detail), detail


def first_wave_ms(clients: int, workers: int, worker_rate: float, steady_ms: float) -> float:
    """Mean prefill time (queue + prefill, ms) of the first `clients` requests of a benchmark started on an
    idle deployment. A closed-loop client (vLLM's and SGLang's `bench serve`, srt-slurm's sa-bench at
    `--request-rate inf --max-concurrency C`) sends its first request at once, so all C reach the prefill
    pool together: each of the `workers` takes its even share and, saturated at `worker_rate` requests/s,
    finishes its j-th prompt at j / worker_rate s; none is faster than the steady state's `steady_ms`. The
    later waves arrive spread out, as fast as the prefill pool let the first one through."""
    share = math.ceil(clients / workers)
    floor = min(share, int(steady_ms / 1000.0 * worker_rate))  # prompts done within the steady time
    paced = sum(range(floor + 1, share + 1)) / worker_rate * 1000.0
    return (floor * steady_ms + paced) / share


def _prefill_bound(
    ctx: SearchContext,
    pool: PrefillPool,
    split: Split,
    dcfg: EngineConfig,
    clients: int,
    per_worker: int,
    load: DecodeLoad,
) -> SplitPoint:
    """`load`: a decode worker holding `per_worker` clients, every client's even share; it holds fewer when
    the prefill pool binds."""
    x, y, osl = split.prefill_workers, split.decode_workers, ctx.req.osl
    rate = x * pool.capacity  # requests/s the saturated prefill pool passes on
    share = per_worker
    for _ in range(FIXED_POINT_STEPS):
        in_decode_s = (load.first[0] + (osl - 1) * load.tpot[0]) / 1000.0
        held = max(1, min(share, math.ceil(rate / y * in_decode_s)))
        if held == per_worker:
            break
        per_worker = held
        load = decode_load(ctx, dcfg, per_worker)
    sim = load.sim
    transfer, link = kv_transfer_s(ctx, pool.cfg, dcfg, split.gpus)
    first = load.first
    # Little's law over the whole deployment: C clients, R requests/s, C / R seconds per request (per clock:
    # the prefill pool's rate and the decode pool's TPOT under the same step-time band)
    rates = clocks(lambda k: x * pool.saturated.request_tps[k])
    ttft = clocks(
        lambda k: max(clients / rates[k] * 1000.0 - (osl - 1) * load.tpot[k], first[k] + transfer * 1000.0)
    )
    prefill_ms = ttft[0] - transfer * 1000.0 - first[0]
    out_tps = clocks(lambda k: rates[k] * osl)
    point = Point(
        config=dcfg,
        replicas=y,
        c_lane=load.c_lane,
        sim=sim,
        ttft=ttft,
        tpot=load.tpot,
        out_tps=out_tps,
        total_tps=clocks(lambda k: rates[k] * (osl + ctx.req.isl)),
        gpus=split.gpus,
        misses=[],
        disagg=DisaggDetail(
            prefill=pool.cfg,
            prefill_workers=x,
            prefill_rate=pool.capacity,
            prefill_ttft_ms=prefill_ms,
            prefill_sim=pool.saturated,
            kv_transfer_ms=transfer * 1000.0,
            link=link,
        ),
    )
    return SplitPoint(point, "prefill", clients, rate, rate, prefill_ms, transfer * 1000.0, first[0])
