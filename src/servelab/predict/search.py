"""`servelab plan`: enumerate deployments of a model on N GPUs, simulate each at a ladder of loads, keep what meets
the TTFT / TPOT limits, rank by output throughput per GPU and mark the Pareto frontier against tokens/s per user.

Coarse to fine, so a whole plan stays near a second: every parallel config first runs a x4 concurrency ladder that
stops at the first SLA miss (a static lower bound on TPOT skips hopeless points without simulating), the boundary
is bisected, and only configs that reach the Pareto front get the x2 points in between. Step prices are memoized per
config and shared by all its simulations.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from servelab.errors import ServelabError
from servelab.predict.pareto import pareto_mask
from servelab.predict.serving.aggregated import SimResult, simulate
from servelab.predict.serving.pricing import StepPricer
from servelab.predict.serving.workload import SpecDecoding, Workload
from servelab.specs import Parallel

SLA_STATS = ("mean", "p50", "p90", "p99")
MAX_LANE_CONCURRENCY = 1024


class PlanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = "sgl-project/DeepSeek-V4-Flash-FP8"
    system: str = "h200_sxm"
    gpus: int = Field(8, ge=1)
    isl: int = Field(8192, ge=1)
    osl: int = Field(1024, ge=1)
    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    sla_stat: str = "mean"
    backend: str = "vllm"
    mode: str = "both"
    top: int = Field(10, ge=1)
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    prefix_hit_rate: float = Field(0.0, ge=0.0, lt=1.0)
    spec_tokens: int = Field(0, ge=0, le=16)
    acceptance: float = Field(0.7, ge=0.0, le=1.0)
    engine: dict = {}  # engine profile overrides (max_num_batched_tokens, max_num_seqs, ...)


class PoolConfig(BaseModel):
    parallel: dict
    workers: int
    gpus_per_worker: int
    concurrency_per_worker: int | None = None
    ttft_ms: float | None = None


class Candidate(BaseModel):
    rank: int = 0
    mode: str  # agg | disagg
    parallel: dict  # label and fields (disagg: "prefill | decode" label)
    replicas: int
    gpus: int
    concurrency: int  # requests in flight over all replicas / decode workers
    concurrency_per_replica: int
    ttft_ms: float
    ttft_ms_low: float
    ttft_ms_high: float
    tpot_ms: float
    tpot_ms_low: float
    tpot_ms_high: float
    tok_s_per_gpu: float  # output tokens/s per GPU
    tok_s_per_gpu_low: float  # throughput band (the high step-time bound gives the low throughput)
    tok_s_per_gpu_high: float
    total_tok_s_per_gpu: float  # input + output tokens/s per GPU (InferenceX's tput_per_gpu)
    tok_s_per_user: float  # 1000 / TPOT
    percentiles: dict
    memory_headroom_gib: float  # KV-cache memory per GPU left after weights, activations and reserve
    kv_utilization: float  # peak fraction of the KV cache in use while simulated
    pareto: bool = False
    meets_sla: bool
    limits: list[str]
    prefill: PoolConfig | None = None
    decode: PoolConfig | None = None
    kv_transfer_ms: float | None = None
    _point: object = PrivateAttr(default=None)


class Plan(BaseModel):
    version: int = 1
    request: PlanRequest
    model: str
    system: str
    backend: str
    engine: dict
    candidates: list[Candidate]
    considered: dict
    dropped: list[str]
    wall_ms: float
    notes: list[str]
    _ctx: object = PrivateAttr(default=None)

    @property
    def context(self):
        """The search context (model, system, engine, perfdb) the explanation needs; not serialized."""
        return self._ctx


# ---- the search context -------------------------------------------------------------------------------------
@dataclass
class Ctx:
    req: PlanRequest
    model: object
    system: object
    engine: object
    db: object
    spec: SpecDecoding
    dropped: list = field(default_factory=list)
    sims: int = 0

    def workload(self, concurrency: int, lanes: int, **kw) -> Workload:
        c_lane = math.ceil(concurrency / lanes)
        n = lanes * max(c_lane, 24)  # short runs: a warm-up of C, then max(C, 24) measured per lane
        base = {
            "isl": self.req.isl,
            "osl": self.req.osl,
            "concurrency": concurrency,
            "num_requests": n,
            "prefix_hit_rate": self.req.prefix_hit_rate,
            "spec": self.spec,
        }
        base.update(kw)
        return Workload(**base)

    def sla_value(self, sim: SimResult, metric: str, clock: int = 0) -> float:
        return sim.metric(metric, self.req.sla_stat, clock)

    def misses(self, ttft: float, tpot: float) -> list[str]:
        out = []
        if self.req.ttft_ms is not None and ttft > self.req.ttft_ms:
            out.append("ttft")
        if self.req.tpot_ms is not None and tpot > self.req.tpot_ms:
            out.append("tpot")
        return out

    def closeness(self, ttft: float, tpot: float) -> float:
        """How far a point is from the SLA: the worst ratio of value to limit (<= 1 meets it)."""
        r = 0.0
        if self.req.ttft_ms:
            r = max(r, ttft / self.req.ttft_ms)
        if self.req.tpot_ms:
            r = max(r, tpot / self.req.tpot_ms)
        return r


@dataclass
class Config:
    """One deployable engine shape: a parallel split that fits, with its memoized step prices."""

    parallel: Parallel
    mem: object
    pricer: StepPricer
    lanes: int
    cap_lane: int  # lane concurrency beyond which only queueing grows (KV or max_num_seqs full)
    tried: dict = field(default_factory=dict)  # lane concurrency -> Point or a miss reason


@dataclass
class Point:
    mode: str
    config: Config
    replicas: int
    c_lane: int
    sim: SimResult
    ttft: tuple
    tpot: tuple
    out_tps: tuple  # per replica (or per deployment for disagg), per clock
    total_tps: tuple
    gpus: int
    misses: list
    extra: dict = field(default_factory=dict)

    @property
    def concurrency_per_replica(self) -> int:
        return self.c_lane * self.config.lanes


# ---- enumeration --------------------------------------------------------------------------------------------
def enumerate_parallel(model, max_gpus: int, divides: int | None = None) -> list[Parallel]:
    """tp x pp splits (powers of two) with ep dividing tp and attention DP on or off; only valid ones."""
    out = []
    tp = 1
    while tp <= max_gpus:
        pp = 1
        while tp * pp <= max_gpus:
            g = tp * pp
            if divides is None or divides % g == 0:
                eps = (
                    [e for e in (1, 2, 4, 8, 16, 32, 64) if e <= tp and tp % e == 0] if model.is_moe else [1]
                )
                for ep in eps:
                    for dp_attn in (False, True) if model.is_moe and tp > 1 else (False,):
                        p = Parallel(tp=tp, ep=ep, dp_attn=dp_attn, pp=pp)
                        try:
                            p.validate(model)
                        except ServelabError:
                            continue
                        out.append(p)
            pp *= 2
        tp *= 2
    return out


def make_config(ctx: Ctx, parallel: Parallel) -> Config | None:
    from servelab.predict.memory import GIB, kv_bytes_per_sequence_per_gpu
    from servelab.predict.static import prepare

    try:
        mem = prepare(ctx.model, ctx.system, parallel, ctx.engine.max_num_batched_tokens)
    except ServelabError as e:
        ctx.dropped.append(f"{parallel.label()}: {e}")
        return None
    length = ctx.req.isl + ctx.req.osl
    per_seq = kv_bytes_per_sequence_per_gpu(ctx.model, parallel, length)
    kv_lane = int(mem.kv_gib * GIB / parallel.pp // per_seq) if mem.kv_gib > 0 else 0
    if kv_lane < 1:
        ctx.dropped.append(
            f"{parallel.label()}: fits, but not one {length}-token sequence of KV cache "
            f"({mem.kv_gib:.2f} GiB free per GPU)"
        )
        return None
    seqs_lane = max(1, ctx.engine.max_num_seqs // parallel.pp)
    cap = min(kv_lane, seqs_lane, MAX_LANE_CONCURRENCY)
    pricer = StepPricer(ctx.model, parallel, ctx.engine, ctx.db, spec_tokens=ctx.spec.draft_tokens)
    return Config(parallel, mem, pricer, parallel.attn_dp * parallel.pp, cap)


# ---- aggregated ---------------------------------------------------------------------------------------------
def agg_point(ctx: Ctx, cfg: Config, c_lane: int, replicas: int):
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
    ttft = tuple(ctx.sla_value(sim, "ttft_ms", k) for k in range(3))
    tpot = tuple(ctx.sla_value(sim, "tpot_ms", k) for k in range(3)) if ctx.req.osl > 1 else (0.0, 0.0, 0.0)
    total = tuple(sim.output_tps[k] + sim.request_tps[k] * ctx.req.isl for k in range(3))
    pt = Point(
        "agg",
        cfg,
        replicas,
        c_lane,
        sim,
        ttft,
        tpot,
        sim.output_tps,
        total,
        cfg.parallel.gpus,
        ctx.misses(ttft[0], tpot[0]),
    )
    cfg.tried[c_lane] = pt
    return pt


def ladder(ctx: Ctx, cfg: Config, replicas: int, factor: int = 4) -> None:
    """Lane concurrency 1, 4, 16, ... up to the cap, stopping at the first miss; then bisect the boundary."""
    c, last_ok, first_bad = 1, None, None
    while True:
        pt = agg_point(ctx, cfg, c, replicas)
        if isinstance(pt, str) or pt.misses:
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
        pt = agg_point(ctx, cfg, mid, replicas)
        if isinstance(pt, str) or pt.misses:
            hi = mid
        else:
            lo = mid


def refine(ctx: Ctx, cfg: Config, replicas: int) -> None:
    """Fill in x2 points between the evaluated ones that met the SLA (for a smoother Pareto front)."""
    ok = sorted(c for c, p in cfg.tried.items() if not isinstance(p, str) and not p.misses)
    for a, b in itertools.pairwise(ok):
        mid = round(math.sqrt(a * b))
        if a < mid < b:
            agg_point(ctx, cfg, mid, replicas)


def search_agg(ctx: Ctx) -> list[Point]:
    n = ctx.req.gpus
    configs = []
    for parallel in enumerate_parallel(ctx.model, n, divides=n):
        cfg = make_config(ctx, parallel)
        if cfg is not None:
            configs.append((cfg, n // parallel.gpus))
    for cfg, replicas in configs:
        ladder(ctx, cfg, replicas)
    points = _points(configs)
    good = [p for p in points if not p.misses]
    if good:
        mask = pareto_mask([_xy(p) for p in good])
        on_front = {id(p.config) for p, m in zip(good, mask) if m}
        for cfg, replicas in configs:
            if id(cfg) in on_front:
                refine(ctx, cfg, replicas)
    return _points(configs)


def _points(configs) -> list[Point]:
    return [p for cfg, _ in configs for p in cfg.tried.values() if not isinstance(p, str)]


def _xy(p: Point) -> tuple[float, float]:
    return (p.out_tps[0] / p.gpus, 1000.0 / p.tpot[0] if p.tpot[0] > 0 else 0.0)


# ---- the plan -----------------------------------------------------------------------------------------------
def make_plan(req: PlanRequest) -> Plan:
    from servelab.perfdb.db import perfdb_for
    from servelab.predict.backends import engine_profile
    from servelab.specs import load_model, load_system

    t0 = time.perf_counter()
    if req.sla_stat not in SLA_STATS:
        raise ServelabError(f"--sla-stat: expected one of {', '.join(SLA_STATS)}, got {req.sla_stat!r}")
    if req.mode not in ("agg", "disagg", "both"):
        raise ServelabError(f"--mode: expected agg, disagg or both, got {req.mode!r}")
    model = load_model(req.model, weight_dtype=req.weight_dtype, kv_dtype=req.kv_dtype)
    system = load_system(req.system)
    engine = engine_profile(req.backend, **req.engine)
    from servelab.specs import check_precision

    check_precision(model, system)
    ctx = Ctx(
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
        from servelab.predict.disagg import search_disagg

        found, note = search_disagg(ctx)
        points += found
        if note:
            notes.append(note)
    if not points:
        if req.mode == "disagg" and notes and any(_points_fit(ctx)):
            raise ServelabError(f"{notes[0]}; aggregated serving fits (--mode agg)")
        raise ServelabError(_nothing_fits(ctx))
    good = [p for p in points if not p.misses]
    if not good:
        raise ServelabError(_closest_miss(ctx, points))
    mask = pareto_mask([_xy(p) for p in good])
    order = sorted(range(len(good)), key=lambda i: -_xy(good[i])[0])
    candidates = []
    for rank, i in enumerate(order, 1):
        if rank > req.top and not mask[i]:
            continue
        candidates.append(to_candidate(ctx, good[i], rank, mask[i]))
    considered = {
        "configs": _count_configs(points),
        "simulations": ctx.sims,
        "points": len(points),
        "meeting_sla": len(good),
        "pareto": sum(mask),
    }
    notes.append(
        f"SLA on the {req.sla_stat} TTFT and TPOT; tok/s/GPU counts output tokens; bands carry the step "
        "model's error band through the simulation"
    )
    plan = Plan(
        request=req,
        model=model.name,
        system=system.name,
        backend=engine.name,
        engine=engine.model_dump(mode="json"),
        candidates=candidates,
        considered=considered,
        dropped=ctx.dropped,
        wall_ms=(time.perf_counter() - t0) * 1000.0,
        notes=notes,
    )
    plan._ctx = ctx
    return plan


def _count_configs(points: list[Point]) -> int:
    return len({(p.mode, p.config.parallel.label(), p.extra.get("label", "")) for p in points})


def to_candidate(ctx: Ctx, p: Point, rank: int, pareto: bool) -> Candidate:
    from servelab.predict.explain import limits_of

    par = p.config.parallel
    gpus = p.gpus * (p.replicas if p.mode == "agg" else 1)
    per_gpu = lambda v: v / p.gpus
    c = Candidate(
        rank=rank,
        mode=p.mode,
        parallel=p.extra.get("parallel") or {"label": par.label(), **par.model_dump()},
        replicas=p.replicas,
        gpus=gpus,
        concurrency=p.extra.get("concurrency", p.concurrency_per_replica * p.replicas),
        concurrency_per_replica=p.extra.get("concurrency_per_replica", p.concurrency_per_replica),
        ttft_ms=p.ttft[0],
        ttft_ms_low=p.ttft[1],
        ttft_ms_high=p.ttft[2],
        tpot_ms=p.tpot[0],
        tpot_ms_low=p.tpot[1],
        tpot_ms_high=p.tpot[2],
        tok_s_per_gpu=per_gpu(p.out_tps[0]),
        tok_s_per_gpu_low=per_gpu(p.out_tps[2]),
        tok_s_per_gpu_high=per_gpu(p.out_tps[1]),
        total_tok_s_per_gpu=per_gpu(p.total_tps[0]),
        tok_s_per_user=_xy(p)[1],
        percentiles=p.extra.get("percentiles", p.sim.percentiles[0]),
        memory_headroom_gib=round(p.extra.get("headroom", p.config.mem.kv_gib), 2),
        kv_utilization=round(p.sim.stats.peak_kv_frac, 3),
        pareto=pareto,
        meets_sla=not p.misses,
        limits=limits_of(ctx, p),
        prefill=p.extra.get("prefill"),
        decode=p.extra.get("decode"),
        kv_transfer_ms=p.extra.get("kv_transfer_ms"),
    )
    c._point = p
    return c


def _points_fit(ctx: Ctx):
    """Parallel configs that fit on all the GPUs (a generator: the first one is enough)."""
    from servelab.predict.memory import memory_per_gpu

    n = ctx.req.gpus
    for p in enumerate_parallel(ctx.model, n, divides=n):
        yield memory_per_gpu(ctx.model, ctx.system, p, ctx.engine.max_num_batched_tokens).fits


def _nothing_fits(ctx: Ctx) -> str:
    from servelab.predict.memory import memory_per_gpu

    req, model = ctx.req, ctx.model
    best = None
    for g in (1, 2, 4, 8, 16, 32, 64, 128):
        for p in enumerate_parallel(model, g, divides=g):
            if p.gpus != g:
                continue
            mem = memory_per_gpu(model, ctx.system, p, ctx.engine.max_num_batched_tokens)
            if mem.fits:
                best = (g, p, mem)
                break
        if best:
            break
    head = f"{model.name} fits no configuration on {req.gpus}x {ctx.system.name}"
    if best and best[0] > req.gpus:
        g, p, mem = best
        return (
            f"{head}: the smallest deployment that fits is {p.label()} on {g} GPUs "
            f"({mem.weights_gib:.1f} GiB of weights per GPU); use --gpus {g} or more, or a smaller --weight-dtype"
        )
    reason = ctx.dropped[0] if ctx.dropped else "no parallel split is valid for this model"
    return f"{head} ({reason})"


def _closest_miss(ctx: Ctx, points: list[Point]) -> str:
    req = ctx.req
    best = min(points, key=lambda p: ctx.closeness(p.ttft[0], p.tpot[0]))
    limits = []
    if req.ttft_ms is not None:
        limits.append(f"TTFT <= {req.ttft_ms:g} ms")
    if req.tpot_ms is not None:
        limits.append(f"TPOT <= {req.tpot_ms:g} ms")
    binding = (
        "TTFT"
        if req.ttft_ms and (not req.tpot_ms or best.ttft[0] / req.ttft_ms >= best.tpot[0] / req.tpot_ms)
        else "TPOT"
    )
    label = best.extra.get("parallel", {}).get("label") or best.config.parallel.label()
    return (
        f"no configuration meets {' and '.join(limits)} ({req.sla_stat}); closest: {best.mode} {label} at "
        f"concurrency {best.extra.get('concurrency', best.concurrency_per_replica * best.replicas)} with TTFT "
        f"{best.ttft[0]:,.0f} ms and TPOT {best.tpot[0]:,.1f} ms; {binding} binds "
        f"({_binding_reason(ctx, best, binding)})"
    )


def _binding_reason(ctx: Ctx, p: Point, binding: str) -> str:
    if binding == "TTFT":
        return f"a lone {ctx.req.isl}-token prefill already takes about {p.ttft[0]:,.0f} ms on this config"
    return f"the fastest decode step found is {p.tpot[0]:,.1f} ms per token"
