"""Disaggregated serving: x prefill workers and y decode workers, each with its own parallel config.

- Decode pool: a decode worker is simulated closed loop at concurrency c with requests whose prompt KV and
  first token have arrived: on SGLang and TensorRT-LLM each joins the running decode batch, whose next
  decode step samples its second token (decode_load says why; vLLM computes the last prompt token again);
  it gives TPOT and, by Little's law on its latencies, the request rate r_d one worker sustains.
- Rate matching: the deployment's request rate is R = y * r_d, so each prefill worker sees R / x requests/s.
  The prefill worker is simulated open loop (Poisson) at that rate with one output token per request, so
  queueing in the prefill pool shows up in TTFT instead of in a fixed efficiency factor. A rate above what a
  prefill worker sustains saturated (its closed-loop capacity) cannot be matched and is dropped.
- KV transfer: the prompt's whole KV cache moves once, over NVLink when both pools sit in one NVLink domain
  (an HGX node, or an NVL72 rack), else over the network; streams run in parallel over min(prefill, decode)
  GPUs.
- TTFT = prefill TTFT (queue + prefill, which samples the first token) + KV transfer + the decode worker's
  part: its wait for a seat and KV room, and for the decode step in progress to end (SGLang, TensorRT-LLM), or
  the step that computes the last prompt token again (vLLM).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from servelab.predict.plan.configs import enumerate_parallel, make_config
from servelab.predict.plan.context import SearchContext
from servelab.predict.plan.points import Clocks, DisaggDetail, EngineConfig, Link, Point, clocks
from servelab.predict.serving.aggregated import SimResult, simulate, steady_rates
from servelab.predict.serving.pricing import StepPricer
from servelab.predict.serving.workload import Workload
from servelab.specs import ModelSpec, SystemSpec

# NCCL all_reduce on H200 NVLink reached 327 of 450 GB/s bus bandwidth; the same fraction is used for KV
# transfers until transfer tables are collected. The fixed cost is the roofline's small-message floor.
LINK_EFFICIENCY = 0.73
TRANSFER_FLOOR_S = 30e-6
RATE_GRID = 1.08  # prefill rates are snapped to this geometric grid so the prefill simulations are reused
# The KV cache arrives at a moment unrelated to the decode worker's steps, and the request joins when the step
# in progress ends: a wait uniform over one decode step, of which each SLA statistic is this share.
STEP_IN_PROGRESS = {"mean": 0.5, "p50": 0.5, "p90": 0.9, "p99": 0.99}


def kv_transfer_s(
    ctx: SearchContext, prefill: EngineConfig, decode: EngineConfig, total_gpus: int
) -> tuple[float, Link]:
    """Seconds to move one prompt's KV cache (all layers, all KV heads) from prefill to decode, and the
    link."""
    return kv_transfer_tokens_s(
        ctx.model, ctx.system, ctx.req.isl, prefill.parallel.gpus, decode.parallel.gpus, total_gpus
    )


def kv_transfer_tokens_s(
    model: ModelSpec, system: SystemSpec, prompt: int, prefill_gpus: int, decode_gpus: int, total_gpus: int
) -> tuple[float, Link]:
    """Seconds to move the KV cache of a `prompt`-token prompt from a prefill worker of `prefill_gpus` to a
    decode worker of `decode_gpus` in a deployment of `total_gpus`, and the link: over NVLink within one
    NVLink domain, else the network; min(prefill, decode GPUs) streams, each at the link's efficiency."""
    nbytes = model.kv_bytes_per_sequence(prompt)
    in_domain = total_gpus <= system.nvlink_domain
    link_gbs = system.nvlink_gbs if in_domain else system.network_gbs
    streams = min(prefill_gpus, decode_gpus)
    seconds = TRANSFER_FLOOR_S + nbytes / (link_gbs * 1e9 * LINK_EFFICIENCY * streams)
    return seconds, "nvlink" if in_domain else "network"


@dataclass(frozen=True)
class PrefillTTFT:
    ttft_ms: Clocks  # the SLA statistic per clock
    sim: SimResult


class PrefillPool:
    """TTFT of one prefill worker config as a function of its request rate (memoized on a rate grid)."""

    def __init__(self, ctx: SearchContext, cfg: EngineConfig):
        self.ctx, self.cfg = ctx, cfg
        self._ttft: dict[int, PrefillTTFT] = {}
        # saturated: enough prompts in flight to fill every step's token budget twice over
        per_lane = min(cfg.cap_lane, max(2, math.ceil(2 * ctx.engine.max_num_batched_tokens / ctx.req.isl)))
        wl = ctx.workload(per_lane * cfg.lanes, cfg.lanes, osl=1)
        sim = simulate(ctx.model, cfg.parallel, ctx.engine, cfg.mem, wl, cfg.pricer)
        ctx.sims += 1
        self.saturated = sim  # the worker saturated (a given split whose prefill pool cannot keep up runs so)
        self.capacity: float = sim.request_tps[0]  # requests/s one worker sustains saturated

    def ttft(self, rate: float) -> PrefillTTFT | None:
        """TTFT at `rate` requests/s, or None when the worker cannot keep up."""
        if rate >= self.capacity * 0.98:
            return None
        key = round(math.log(rate) / math.log(RATE_GRID))
        if key not in self._ttft:
            ctx, cfg = self.ctx, self.cfg
            wl = Workload(
                isl=ctx.req.isl,
                osl=1,
                rate=RATE_GRID**key,
                num_requests=max(32, 8 * cfg.lanes),
                prefix_hit_rate=ctx.req.prefix_hit_rate,
                range_ratio=ctx.range_ratio,
            )
            sim = simulate(ctx.model, cfg.parallel, ctx.engine, cfg.mem, wl, cfg.pricer)
            ctx.sims += 1
            self._ttft[key] = PrefillTTFT(ctx.sla_clocks(sim, "ttft_ms"), sim)
        return self._ttft[key]


def decode_worker(ctx: SearchContext, cfg: EngineConfig) -> EngineConfig:
    """`cfg` as a disaggregated decode worker: its CUDA graphs cover every batch it may hold (cap_lane per
    attention-DP rank), not the engine's aggregated default.

    The disaggregated deployments benchmarked (NVIDIA srt-slurm's recipes, which InferenceX runs; pinned under
    src/servelab/recipes/data/srtslurm/recipes/) size each decode worker's CUDA graphs to its batch limit:
    TensorRT-LLM's decode `cuda_graph_config.batch_sizes` reach its per-rank `max_batch_size` in every one
    (e.g. trtllm/h200/8k1k/stp/c128_ctx1_gen1_dep8_batch256_eplb0_mtp0.yaml: 256 and [1, ..., 256]), SGLang's
    `cuda-graph-max-bs` covers its `max-running-requests` per DP rank in all but two, and vLLM's
    `max-cudagraph-capture-size` is its `max-num-seqs`. A decode worker runs no prompt step, so every step it
    takes replays a graph."""
    graphs = cfg.cap_lane * cfg.parallel.attn_dp
    if graphs <= cfg.pricer.engine.cuda_graph_max_batch:
        return cfg
    engine = ctx.engine.model_copy(update={"cuda_graph_max_batch": graphs, "cuda_graph_by_split": False})
    pricer = StepPricer(ctx.model, cfg.parallel, engine, ctx.db, spec_tokens=ctx.spec.draft_tokens)
    return replace(cfg, pricer=pricer, tried={})


@dataclass(frozen=True)
class DecodeLoad:
    """One decode worker at lane concurrency c_lane."""

    c_lane: int
    sim: SimResult
    tpot: Clocks
    first: Clocks  # ms from the KV's arrival to the first token's delivery by the decode worker


def decode_load(ctx: SearchContext, cfg: EngineConfig, concurrency: int) -> DecodeLoad:
    """A decode worker simulated closed loop with `concurrency` requests in flight (spread over its lanes).

    The prefill worker samples the first token and the decode worker delivers it: SGLang's decode side
    (python/sglang/srt/disaggregation/decode.py) takes a transferred request's first output id from the
    metadata buffer the prefill side filled, streams it through a prebuilt batch that runs no forward
    pass, and merges the request into the running decode batch; TensorRT-LLM's generation-only requests
    (trtllm-serve disaggregated, Dynamo's decode workers) carry the context phase's first token in their
    disaggregated parameters and go on from it; AIConfigurator prices a disaggregated TTFT as the prefill
    worker's alone. So the arrived request is no prompt step at the decode worker (an eager step, outside
    the CUDA graphs, of 190-250 ms for DeepSeek-R1 on TensorRT-LLM and SGLang): it joins the batch between
    steps, and its first step there is a decode step of that batch, which samples its second token
    (SchedulingPolicy.joins_arrived_requests). vLLM's decode worker is left as it was: its scheduler is
    recalled to compute the last prompt token again once the remote KV has arrived (a one-token prompt
    chunk beside the decodes, whose step samples the first token), which this keeps."""
    wl = ctx.workload(concurrency, cfg.lanes)
    sim = simulate(ctx.model, cfg.parallel, ctx.engine, cfg.mem, wl, cfg.pricer, prefilled=True)
    ctx.sims += 1
    sim = steady_rates(sim, concurrency, ctx.req.osl)
    first = ctx.sla_clocks(sim, "ttft_ms")
    if ctx.engine.policy.joins_arrived_requests():
        share = STEP_IN_PROGRESS[ctx.req.sla_stat]
        first = clocks(lambda k: first[k] + share * sim.metric("itl_ms", "mean", k))
    return DecodeLoad(math.ceil(concurrency / cfg.lanes), sim, ctx.sla_clocks(sim, "tpot_ms"), first)


def decode_curve(ctx: SearchContext, cfg: EngineConfig) -> list[DecodeLoad]:
    """A decode worker at lane concurrency 1, 4, 16, ... until TPOT misses its limit or the worker is full."""
    loads, c = [], 1
    while True:
        if ctx.req.tpot_ms is not None and c > 1:
            bound = cfg.pricer.decode(c, ctx.req.isl)[0] / 1000.0 / ctx.spec.tokens_per_step
            if bound > ctx.req.tpot_ms:
                break
        load = decode_load(ctx, cfg, c * cfg.lanes)
        loads.append(load)
        if (ctx.req.tpot_ms is not None and load.tpot[0] > ctx.req.tpot_ms) or c >= cfg.cap_lane:
            break
        c = min(c * 4, cfg.cap_lane)
    return loads


def search_disagg(ctx: SearchContext) -> tuple[list[Point], str | None]:
    """Every prefill + decode split of the GPUs at every decode load whose rate the prefill pool matches; a
    note instead when no split fits."""
    n = ctx.req.gpus
    if n < 2:
        return [], "disagg: needs at least 2 GPUs"
    configs = []
    for parallel in enumerate_parallel(ctx.model, n - 1):
        if parallel.pp > 1:  # P/D workers in Dynamo, SGLang and vLLM are TP / EP / DP-attention engines
            continue
        cfg = make_config(ctx, parallel)
        if cfg is not None:
            configs.append(cfg)
    pairs = [(p, d) for p in configs for d in configs if p.parallel.gpus + d.parallel.gpus <= n]
    if not pairs:
        smallest = min((c.parallel.gpus for c in configs), default=None)
        why = (
            f"the smallest worker that fits needs {smallest} GPUs"
            if smallest
            else "no worker fits on fewer GPUs"
        )
        return [], f"disagg: no prefill + decode split fits in {n} GPUs ({why})"
    prefill_pools = {id(p): PrefillPool(ctx, p) for p in {id(p): p for p, _ in pairs}.values()}
    keep = _best_prefill(prefill_pools.values())
    pairs = [(p, d) for p, d in pairs if id(p) in keep]
    workers = {key: decode_worker(ctx, d) for key, d in {id(d): d for _, d in pairs}.items()}
    curves = {key: decode_curve(ctx, d) for key, d in workers.items()}
    out: list[Point] = []
    for pcfg, dcfg in pairs:
        gp, gd = pcfg.parallel.gpus, dcfg.parallel.gpus
        for x in range(1, n // gp + 1):
            for y in range(1, (n - x * gp) // gd + 1):
                if n - (x * gp + y * gd) >= min(gp, gd):  # another worker would fit: a larger split does
                    continue
                for load in curves[id(dcfg)]:
                    pt = price_split(ctx, prefill_pools[id(pcfg)], x, workers[id(dcfg)], y, load)
                    if pt is not None:
                        out.append(pt)
    return out, None


def _best_prefill(pools: Iterable[PrefillPool], per_size: int = 2) -> set[int]:
    """Prefill configs worth pairing: per worker size, the ones with the most capacity per GPU (a prefill
    worker's TTFT at a given share of its capacity barely depends on anything else)."""
    by_size: dict[int, list[PrefillPool]] = {}
    for pool in pools:
        by_size.setdefault(pool.cfg.parallel.gpus, []).append(pool)
    keep: set[int] = set()
    for group in by_size.values():
        group.sort(key=lambda p: -p.capacity)
        keep.update(id(p.cfg) for p in group[:per_size])
    return keep


def price_split(
    ctx: SearchContext, pool: PrefillPool, x: int, dcfg: EngineConfig, y: int, load: DecodeLoad
) -> Point | None:
    """One given split: x prefill workers of `pool` feeding y decode workers of `dcfg`, each decode worker at
    `load`; None when the prefill pool cannot keep up with the decode pool (the planner drops that point; a
    given split runs prefill-bound, predict.plan.split)."""
    used = x * pool.cfg.parallel.gpus + y * dcfg.parallel.gpus
    transfer, link = kv_transfer_s(ctx, pool.cfg, dcfg, used)
    return _combine(ctx, pool, x, dcfg, y, load, transfer, link, used)


def _combine(
    ctx: SearchContext,
    pool: PrefillPool,
    x: int,
    dcfg: EngineConfig,
    y: int,
    load: DecodeLoad,
    transfer: float,
    link: Link,
    used: int,
) -> Point | None:
    """x prefill workers of `pool` feeding y decode workers of `dcfg` at `load`, or None when the prefill pool
    cannot keep up with the decode pool."""
    sim = load.sim
    rate = y * sim.request_tps[0]
    pre = pool.ttft(rate / x)
    if pre is None:
        return None
    dec_ttft = load.first
    ttft = clocks(lambda k: pre.ttft_ms[k] + transfer * 1000.0 + dec_ttft[k])
    out_tps = clocks(lambda k: y * sim.output_tps[k])
    return Point(
        config=dcfg,
        replicas=y,
        c_lane=load.c_lane,
        sim=sim,
        ttft=ttft,
        tpot=load.tpot,
        out_tps=out_tps,
        total_tps=clocks(lambda k: out_tps[k] + y * sim.request_tps[k] * ctx.req.isl),
        gpus=used,
        misses=ctx.misses(ttft[0], load.tpot[0]),
        disagg=DisaggDetail(
            prefill=pool.cfg,
            prefill_workers=x,
            prefill_rate=rate / x,
            prefill_ttft_ms=pre.ttft_ms[0],
            prefill_sim=pre.sim,
            kv_transfer_ms=transfer * 1000.0,
            link=link,
        ),
    )
