"""Aggregated serving: every parallel config that divides the GPUs, replicated over them, at a ladder of
loads.

Coarse to fine: each config runs a x4 concurrency ladder that stops at the first SLA miss (a static lower
bound on TPOT skips hopeless points without simulating), the boundary is bisected, and only configs that reach
the Pareto front get the x2 points in between. A point's request and output rates are the steady state's, by
Little's law on its simulated latencies (steady_rates), as a disaggregated decode worker's are.
"""

from __future__ import annotations

import itertools
import math

from servelab.predict.plan.configs import enumerate_parallel, make_config
from servelab.predict.plan.context import SearchContext
from servelab.predict.plan.pareto import pareto_mask
from servelab.predict.plan.points import EngineConfig, Point, clocks
from servelab.predict.serving.aggregated import simulate, steady_rates


def agg_point(ctx: SearchContext, cfg: EngineConfig, c_lane: int, replicas: int) -> Point | str:
    """Simulate one config at lane concurrency c_lane; a miss string instead when a bound rules it out."""
    if c_lane in cfg.tried:
        return cfg.tried[c_lane]
    tpot_limit = ctx.req.tpot_ms
    if tpot_limit is not None and c_lane > 1:
        # a decode step of c_lane sequences at the prompt's length is a lower bound on TPOT at this load
        bound = cfg.pricer.decode(c_lane, ctx.req.isl)[0] / 1000.0 / ctx.spec.tokens_per_step
        if bound > tpot_limit:
            cfg.tried[c_lane] = f"tpot >= {bound:.1f} ms (decode step alone)"
            return cfg.tried[c_lane]
    wl = ctx.workload(c_lane * cfg.lanes, cfg.lanes)
    sim = simulate(ctx.model, cfg.parallel, ctx.engine, cfg.mem, wl, cfg.pricer)
    ctx.sims += 1
    # the steady state's rates, as a decode worker's: the short window overstates them (steady_rates)
    sim = steady_rates(sim, wl.clients, ctx.req.osl)
    ttft = ctx.sla_clocks(sim, "ttft_ms")
    tpot = ctx.sla_clocks(sim, "tpot_ms") if ctx.req.osl > 1 else (0.0, 0.0, 0.0)
    pt = Point(
        config=cfg,
        replicas=replicas,
        c_lane=c_lane,
        sim=sim,
        ttft=ttft,
        tpot=tpot,
        out_tps=sim.output_tps,
        total_tps=clocks(lambda k: sim.output_tps[k] + sim.request_tps[k] * ctx.req.isl),
        gpus=cfg.parallel.gpus,
        misses=ctx.misses(ttft[0], tpot[0]),
    )
    cfg.tried[c_lane] = pt
    return pt


def _meets(pt: Point | str) -> bool:
    return isinstance(pt, Point) and not pt.misses


def ladder(ctx: SearchContext, cfg: EngineConfig, replicas: int, factor: int = 4) -> None:
    """Lane concurrency 1, 4, 16, ... up to the cap, stopping at the first miss; then bisect the boundary."""
    c, last_ok, first_bad = 1, None, None
    while True:
        if not _meets(agg_point(ctx, cfg, c, replicas)):
            first_bad = c
            break
        last_ok = c
        if c >= cfg.cap_lane:
            break
        c = min(c * factor, cfg.cap_lane)
    if last_ok is None or first_bad is None:
        return
    lo, hi = last_ok, first_bad
    for _ in range(3):  # bisect geometrically: the highest load that still meets the SLA is usually the best
        mid = round(math.sqrt(lo * hi))
        if mid <= lo or mid >= hi:
            break
        if _meets(agg_point(ctx, cfg, mid, replicas)):
            lo = mid
        else:
            hi = mid


def refine(ctx: SearchContext, cfg: EngineConfig, replicas: int) -> None:
    """Fill in x2 points between the evaluated ones that met the SLA (for a smoother Pareto front)."""
    ok = sorted(c for c, p in cfg.tried.items() if _meets(p))
    for a, b in itertools.pairwise(ok):
        mid = round(math.sqrt(a * b))
        if a < mid < b:
            agg_point(ctx, cfg, mid, replicas)


def search_agg(ctx: SearchContext) -> list[Point]:
    n = ctx.req.gpus
    configs = []
    for parallel in enumerate_parallel(ctx.model, n, divides=n):
        cfg = make_config(ctx, parallel)
        if cfg is not None:
            configs.append((cfg, n // parallel.gpus))
    for cfg, replicas in configs:
        ladder(ctx, cfg, replicas)
    good = [p for p in _points(configs) if not p.misses]
    if good:
        mask = pareto_mask([p.xy() for p in good])
        on_front = {id(p.config) for p, m in zip(good, mask, strict=True) if m}
        for cfg, replicas in configs:
            if id(cfg) in on_front:
                refine(ctx, cfg, replicas)
    return _points(configs)


def _points(configs: list[tuple[EngineConfig, int]]) -> list[Point]:
    return [p for cfg, _ in configs for p in cfg.tried.values() if isinstance(p, Point)]
