"""`servelab plan`: enumerate deployments of a model on N GPUs, simulate each at a ladder of loads, keep what
meets the TTFT / TPOT limits, rank by output throughput per GPU and mark the Pareto frontier against tokens/s
per user.

A whole plan stays near a second: step prices are memoized per config and shared by all its simulations, and
the searches (agg.py, disagg.py) skip hopeless loads on a static bound.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from servelab.engines import with_engine_kv
from servelab.errors import ServelabError
from servelab.perfdb.db import perfdb_for
from servelab.predict.band_domain import Asked
from servelab.predict.engines import engine_profile
from servelab.predict.graph import StepShape
from servelab.predict.memory import memory_per_gpu
from servelab.predict.plan.agg import search_agg
from servelab.predict.plan.bands import band_candidates
from servelab.predict.plan.candidates import Candidate, Considered, Plan, PoolConfig
from servelab.predict.plan.configs import enumerate_parallel
from servelab.predict.plan.context import SearchContext
from servelab.predict.plan.disagg import search_disagg
from servelab.predict.plan.explain import limits_of
from servelab.predict.plan.pareto import pareto_mask
from servelab.predict.plan.points import Point
from servelab.predict.plan.request import PlanError, PlanRequest
from servelab.predict.provenance import time_shares
from servelab.predict.serving.workload import SpecDecoding
from servelab.predict.step import add_counts, priced_step
from servelab.readable import typed
from servelab.specs import check_precision, load_model, load_system


def make_plan(req: PlanRequest) -> Plan:
    """Search, rank and mark the Pareto front; PlanError (or ServelabError) when nothing can be planned."""
    with paused_gc():
        return _make_plan(req)


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for a while. A plan allocates hundreds of thousands of objects that
    live to its end (op keys, priced steps, simulated requests) and makes almost no reference cycles: each
    full collection walks all of them for nothing, a sixth of a DeepSeek-V3 plan's time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _make_plan(req: PlanRequest) -> Plan:
    t0 = time.perf_counter()
    model = load_model(req.model, weight_dtype=req.weight_dtype, kv_dtype=req.kv_dtype)
    if req.isl + req.osl > model.max_context:
        raise PlanError(
            lambda name: (
                f"{name('isl')} {req.isl} + {name('osl')} {req.osl} = {req.isl + req.osl} tokens exceeds "
                f"{model.name}'s maximum context of {model.max_context} tokens"
            )
        )
    system = load_system(req.system)
    if req.kv_dtype is None:
        model = with_engine_kv(model, req.backend, system.compute_capability)
    settings: dict[str, Any] = dict(req.engine)  # the engine flags given (not the GPU's keywords)
    engine = engine_profile(
        req.backend, system.hbm_gib, calibration=req.calibration, gpu_name=system.gpu_name, **settings
    )
    model = engine.model_as_served(model)
    engine = engine.running(model, system)  # the MoE terms where their fit reaches
    check_precision(model, system)
    ctx = SearchContext(
        req,
        model,
        system,
        engine,
        perfdb_for(system, engine.name),
        SpecDecoding(draft_tokens=req.spec_tokens, acceptance=req.acceptance),
    )
    points: list[Point] = []
    notes: list[str] = []
    if req.mode in ("agg", "both"):
        points += search_agg(ctx)
    if req.mode in ("disagg", "both"):
        found, note = search_disagg(ctx)
        points += found
        if note:
            notes.append(note)
    if not points:
        if req.mode == "disagg" and notes and _agg_fits(ctx):
            why = notes[0]
            raise PlanError(lambda name: f"{why}; aggregated serving fits ({name('mode')} agg)")
        raise _nothing_fits(ctx)
    within = [p for p in points if not p.misses]
    if not within:
        raise ServelabError(_closest_miss(ctx, points))
    good = [p for p in within if req.request_rate is None or p.request_rate >= req.request_rate]
    if not good:
        raise _rate_miss(req, max(within, key=lambda p: p.request_rate))
    mask = pareto_mask([p.xy() for p in good])
    order = sorted(range(len(good)), key=lambda i: -good[i].xy()[0])
    candidates = []
    for rank, i in enumerate(order, 1):
        if rank > req.top and not mask[i]:
            continue
        candidates.append(to_candidate(ctx, good[i], rank, mask[i]))
    considered = Considered(
        configs=len({(p.mode, p.label()) for p in points}),
        simulations=ctx.sims,
        points=len(points),
        meeting_sla=len(good),
        pareto=sum(mask),
    )
    asked = Asked.of(model.name, system.name, 0, req.isl, req.osl)  # each candidate's concurrency
    band_note = band_candidates(candidates, engine.name, req.calibration, asked)
    notes.append(f"SLA on the {req.sla_stat} TTFT and TPOT; tok/s/GPU counts output tokens; {band_note}")
    if req.default_sla:
        notes.append(f"SLA: the interactive default ({req.sla_text()}); give TTFT / TPOT limits to change it")
    return Plan(
        request=req,
        model=model.name,
        system=system.name,
        backend=engine.name,
        engine=engine,
        candidates=candidates,
        considered=considered,
        dropped=ctx.dropped,
        wall_ms=(time.perf_counter() - t0) * 1000.0,
        notes=notes,
        context=ctx,
    )


def point_sources(ctx: SearchContext, p: Point) -> dict[str, float]:
    """The share of a point's kernel time by source: a typical decode step and a typical prompt step of each
    pool, weighted by the time its simulation spent in steps of that kind."""
    req = ctx.req
    decode = StepShape(decode_batch=max(p.c_lane, 1), decode_kv_len=req.isl + req.osl // 2)
    prompt = StepShape(prefill=((min(req.isl, ctx.engine.max_num_batched_tokens), 0),))
    if p.disagg is None:
        steps = [(p.config.parallel, decode, p.sim.stats.busy_decode_s), (p.config.parallel, prompt,
                 p.sim.stats.busy_mixed_s)]  # fmt: skip
    else:
        prefill = p.disagg.prefill_sim.stats
        steps = [
            (p.config.parallel, decode, p.sim.stats.busy_decode_s + p.sim.stats.busy_mixed_s),
            (p.disagg.prefill.parallel, prompt, prefill.busy_mixed_s + prefill.busy_decode_s),
        ]
    source_us: dict[str, float] = {}
    for parallel, shape, busy in steps:
        step = priced_step(ctx.model, parallel, shape, ctx.engine, ctx.db)
        if step.kernel_us > 0 and busy > 0:
            source_us = add_counts(source_us, step.source_us, busy / step.kernel_us)
    return time_shares(source_us)


def to_candidate(ctx: SearchContext, p: Point, rank: int, pareto: bool) -> Candidate:
    out_tps, per_replica = p.out_tps, p.concurrency_per_replica
    prefill = decode = None
    if p.disagg is None:
        parallel = p.config.parallel_dict()
        headroom = p.config.mem.kv_gib
        percentiles = p.sim.percentiles[0]
    else:
        d = p.disagg
        prefill_parallel, decode_parallel = d.prefill.parallel_dict(), p.config.parallel_dict()
        parallel = {"label": p.label(), "prefill": prefill_parallel, "decode": decode_parallel}
        prefill = PoolConfig(
            parallel=prefill_parallel,
            workers=d.prefill_workers,
            gpus_per_worker=d.prefill.parallel.gpus,
            ttft_ms=d.prefill_ttft_ms,
        )
        decode = PoolConfig(
            parallel=decode_parallel,
            workers=p.replicas,
            gpus_per_worker=p.config.parallel.gpus,
            concurrency_per_worker=per_replica,
        )
        headroom = min(d.prefill.mem.kv_gib, p.config.mem.kv_gib)
        percentiles = d.percentiles(p.sim)
    return Candidate(
        rank=rank,
        mode=p.mode,
        parallel=parallel,
        replicas=p.replicas,
        gpus=p.gpus * (p.replicas if p.disagg is None else 1),
        concurrency=p.concurrency,
        concurrency_per_replica=per_replica,
        ttft_ms=p.ttft[0],
        ttft_ms_low=p.ttft[1],
        ttft_ms_high=p.ttft[2],
        tpot_ms=p.tpot[0],
        tpot_ms_low=p.tpot[1],
        tpot_ms_high=p.tpot[2],
        tok_s_per_gpu=out_tps[0] / p.gpus,
        tok_s_per_gpu_low=out_tps[2] / p.gpus,
        tok_s_per_gpu_high=out_tps[1] / p.gpus,
        total_tok_s_per_gpu=p.total_tps[0] / p.gpus,
        tok_s_per_user=p.xy()[1],
        percentiles=percentiles,
        memory_headroom_gib=round(headroom, 2),
        kv_utilization=round(p.sim.stats.peak_kv_frac, 3),
        pareto=pareto,
        meets_sla=not p.misses,
        request_rate=p.request_rate,
        limits=limits_of(ctx, p),
        prefill=prefill,
        decode=decode,
        kv_transfer_ms=None if p.disagg is None else p.disagg.kv_transfer_ms,
        kernel_time_by_source=point_sources(ctx, p),
        point=p,
    )


def _agg_fits(ctx: SearchContext) -> bool:
    """Whether some parallel config fits in memory on all the GPUs."""
    n, engine = ctx.req.gpus, ctx.engine
    return any(
        memory_per_gpu(
            ctx.model,
            ctx.system,
            p,
            engine.max_num_batched_tokens,
            **engine.kv_rule,
        ).fits
        for p in enumerate_parallel(ctx.model, n, divides=n)
    )


def _nothing_fits(ctx: SearchContext) -> ServelabError:
    req, model = ctx.req, ctx.model
    best = None
    for g in (1, 2, 4, 8, 16, 32, 64, 128):
        for p in enumerate_parallel(model, g, divides=g):
            if p.gpus != g:
                continue
            mem = memory_per_gpu(
                model,
                ctx.system,
                p,
                ctx.engine.max_num_batched_tokens,
                **ctx.engine.kv_rule,
            )
            if mem.fits:
                best = (g, p, mem)
                break
        if best:
            break
    head = f"{model.name} fits no configuration on {req.gpus}x {ctx.system.name}"
    if best and best[0] > req.gpus:
        g, p, mem = best
        fits = f"the smallest deployment that fits is {p.label()} on {g} GPUs"
        weights = f"{mem.weights_gib:.1f} GiB of weights per GPU"
        return PlanError(
            lambda name: (
                f"{head}: {fits} ({weights}); use {name('gpus')} {g} or more, "
                f"or a smaller {name('weight_dtype')}"
            )
        )
    reason = ctx.dropped[0] if ctx.dropped else "no parallel split is valid for this model"
    return ServelabError(f"{head} ({reason})")


def _closest_miss(ctx: SearchContext, points: list[Point]) -> str:
    req = ctx.req
    best = min(points, key=lambda p: ctx.closeness(p.ttft[0], p.tpot[0]))
    ratios = ctx.ratios(best.ttft[0], best.tpot[0])
    binding = max(ratios, key=lambda name: ratios[name])
    return (
        f"no configuration meets {req.sla_text()} ({req.sla_stat}); closest: {best.mode} "
        f"{best.label()} at concurrency {best.concurrency} with TTFT {best.ttft[0]:,.0f} ms and TPOT "
        f"{best.tpot[0]:,.1f} ms; {binding.upper()} binds ({_binding_reason(ctx, best, binding)})"
    )


def _binding_reason(ctx: SearchContext, p: Point, binding: str) -> str:
    if binding == "ttft":
        return f"a lone {ctx.req.isl}-token prefill already takes about {p.ttft[0]:,.0f} ms on this config"
    if binding == "e2e":
        e2e = ctx.e2e(p.ttft[0], p.tpot[0])
        return f"TTFT + {ctx.req.osl - 1} x TPOT is {e2e:,.0f} ms at best"
    return f"the fastest decode step found is {p.tpot[0]:,.1f} ms per token"


def _rate_miss(req: PlanRequest, most: Point) -> PlanError:
    return PlanError(
        lambda name: (
            f"no configuration serves {name('request_rate')} {typed(req.request_rate or 0.0)} requests/s "
            f"within "
            f"{req.sla_text()} ({req.sla_stat}); the most is {most.request_rate:,.2f} requests/s "
            f"({most.mode} {most.label()} at concurrency {most.concurrency})"
        )
    )
