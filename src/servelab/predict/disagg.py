"""Disaggregated serving: x prefill workers and y decode workers, each with its own parallel config.

- Decode pool: a decode worker is simulated closed loop at concurrency c with requests whose prompt KV has arrived
  (its first step samples the first token); it gives TPOT and the request rate r_d one worker sustains.
- Rate matching: the deployment's request rate is R = y * r_d, so each prefill worker sees R / x requests/s.
  The prefill worker is simulated open loop (Poisson) at that rate with one output token per request, so queueing
  in the prefill pool shows up in TTFT instead of in a fixed efficiency factor. A rate above what a prefill worker
  sustains saturated (its closed-loop capacity) cannot be matched and is dropped.
- KV transfer: the prompt's whole KV cache moves once, over NVLink when both pools sit in one NVLink domain
  (an HGX node, or an NVL72 rack), else over the network; streams run in parallel over min(prefill, decode) GPUs.
- TTFT = prefill TTFT (queue + prefill) + KV transfer + the decode worker's first step (with its own queueing).
"""

from __future__ import annotations

import math

from servelab.predict.search import Config, Ctx, Point, enumerate_parallel, make_config
from servelab.predict.serving.aggregated import simulate
from servelab.predict.serving.workload import Workload

# NCCL all_reduce on H200 NVLink reached 327 of 450 GB/s bus bandwidth (reference/systems.md); the same fraction is
# used for KV transfers until transfer tables are collected. The fixed cost is the roofline's small-message floor.
LINK_EFFICIENCY = 0.73
TRANSFER_FLOOR_S = 30e-6
RATE_GRID = 1.08  # prefill rates are snapped to this geometric grid so the prefill simulations are reused


def kv_transfer_s(ctx: Ctx, prefill: Config, decode: Config, total_gpus: int) -> tuple[float, str]:
    model, system = ctx.model, ctx.system
    nbytes = model.kv_bytes_per_sequence(
        ctx.req.isl
    )  # all layers, all KV heads: one copy of the prompt's cache
    in_domain = total_gpus <= system.nvlink_domain
    link_gbs = system.nvlink_gbs if in_domain else system.network_gbs
    streams = min(prefill.parallel.gpus, decode.parallel.gpus)
    return TRANSFER_FLOOR_S + nbytes / (
        link_gbs * 1e9 * LINK_EFFICIENCY * streams
    ), "nvlink" if in_domain else "network"


class PrefillPool:
    """TTFT of one prefill worker config as a function of its request rate (memoized on a rate grid)."""

    def __init__(self, ctx: Ctx, cfg: Config):
        self.ctx, self.cfg = ctx, cfg
        self._ttft: dict = {}
        # saturated: enough prompts in flight to fill every step's token budget twice over
        per_lane = min(cfg.cap_lane, max(2, math.ceil(2 * ctx.engine.max_num_batched_tokens / ctx.req.isl)))
        wl = ctx.workload(per_lane * cfg.lanes, cfg.lanes, osl=1)
        sim = simulate(ctx.model, cfg.parallel, ctx.engine, cfg.mem, wl, cfg.pricer)
        ctx.sims += 1
        self.capacity = sim.request_tps[0]  # requests/s one worker sustains saturated

    def ttft(self, rate: float):
        """(ttft per clock, sla stat) at `rate` requests/s, or None when the worker cannot keep up."""
        if rate >= self.capacity * 0.98:
            return None
        key = round(math.log(rate) / math.log(RATE_GRID))
        if key not in self._ttft:
            q = RATE_GRID**key
            req = self.ctx.req
            wl = Workload(
                isl=req.isl,
                osl=1,
                rate=q,
                num_requests=max(32, 8 * self.cfg.lanes),
                prefix_hit_rate=req.prefix_hit_rate,
            )
            sim = simulate(
                self.ctx.model, self.cfg.parallel, self.ctx.engine, self.cfg.mem, wl, self.cfg.pricer
            )
            self.ctx.sims += 1
            self._ttft[key] = (tuple(self.ctx.sla_value(sim, "ttft_ms", k) for k in range(3)), sim)
        return self._ttft[key]


def decode_curve(ctx: Ctx, cfg: Config) -> list[Point]:
    """A decode worker at lane concurrency 1, 4, 16, ... until TPOT misses its limit or the worker is full."""
    points, c = [], 1
    while True:
        if ctx.req.tpot_ms is not None and c > 1:
            bound = cfg.pricer.decode(c, ctx.req.isl)[0] / 1000.0 / ctx.spec.tokens_per_step
            if bound > ctx.req.tpot_ms:
                break
        wl = ctx.workload(c * cfg.lanes, cfg.lanes)
        sim = simulate(ctx.model, cfg.parallel, ctx.engine, cfg.mem, wl, cfg.pricer, prefilled=True)
        ctx.sims += 1
        tpot = tuple(ctx.sla_value(sim, "tpot_ms", k) for k in range(3))
        points.append(
            Point(
                "disagg",
                cfg,
                1,
                c,
                sim,
                (0.0,) * 3,
                tpot,
                sim.output_tps,
                sim.output_tps,
                cfg.parallel.gpus,
                [],
            )
        )
        if (ctx.req.tpot_ms is not None and tpot[0] > ctx.req.tpot_ms) or c >= cfg.cap_lane:
            break
        c = min(c * 4, cfg.cap_lane)
    return points


def search_disagg(ctx: Ctx) -> tuple[list[Point], str | None]:
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
    curves = {id(d): decode_curve(ctx, d) for d in {id(d): d for _, d in pairs}.values()}
    out: list[Point] = []
    for pcfg, dcfg in pairs:
        gp, gd = pcfg.parallel.gpus, dcfg.parallel.gpus
        for x in range(1, n // gp + 1):
            for y in range(1, (n - x * gp) // gd + 1):
                used = x * gp + y * gd
                if n - used >= min(gp, gd):  # another worker would fit: a larger split covers this one
                    continue
                transfer, link = kv_transfer_s(ctx, pcfg, dcfg, used)
                for dp in curves[id(dcfg)]:
                    pt = _combine(ctx, pcfg, dcfg, x, y, dp, prefill_pools[id(pcfg)], transfer, link, used)
                    if pt is not None:
                        out.append(pt)
    return out, None


def _best_prefill(pools, per_size: int = 2) -> set[int]:
    """Prefill configs worth pairing: per worker size, the ones with the most capacity per GPU (a prefill worker's
    TTFT at a given share of its capacity barely depends on anything else)."""
    by_size: dict[int, list] = {}
    for pool in pools:
        by_size.setdefault(pool.cfg.parallel.gpus, []).append(pool)
    keep = set()
    for group in by_size.values():
        group.sort(key=lambda p: -p.capacity)
        keep.update(id(p.cfg) for p in group[:per_size])
    return keep


def _combine(
    ctx: Ctx,
    pcfg: Config,
    dcfg: Config,
    x: int,
    y: int,
    dp: Point,
    pool: PrefillPool,
    transfer: float,
    link: str,
    used: int,
) -> Point | None:
    sim = dp.sim
    rate = y * sim.request_tps[0]
    got = pool.ttft(rate / x)
    if got is None:
        return None  # the prefill pool cannot keep up with the decode pool at this load
    pre_ttft, pre_sim = got
    dec_ttft = tuple(ctx.sla_value(sim, "ttft_ms", k) for k in range(3))
    ttft = tuple(pre_ttft[k] + transfer * 1000.0 + dec_ttft[k] for k in range(3))
    out_tps = tuple(y * sim.output_tps[k] for k in range(3))
    total = tuple(out_tps[k] + y * sim.request_tps[k] * ctx.req.isl for k in range(3))
    pl, dl = pcfg.parallel.label(), dcfg.parallel.label()
    label = f"{x}x {pl} | {y}x {dl}"
    extra = {
        "label": label,
        "parallel": {
            "label": label,
            "prefill": {"label": pl, **pcfg.parallel.model_dump()},
            "decode": {"label": dl, **dcfg.parallel.model_dump()},
        },
        "concurrency": dp.c_lane * dcfg.lanes * y,
        "concurrency_per_replica": dp.c_lane * dcfg.lanes,
        "prefill": {
            "parallel": {"label": pl, **pcfg.parallel.model_dump()},
            "workers": x,
            "gpus_per_worker": pcfg.parallel.gpus,
            "ttft_ms": pre_ttft[0],
        },
        "decode": {
            "parallel": {"label": dl, **dcfg.parallel.model_dump()},
            "workers": y,
            "gpus_per_worker": dcfg.parallel.gpus,
            "concurrency_per_worker": dp.c_lane * dcfg.lanes,
        },
        "kv_transfer_ms": transfer * 1000.0,
        "link": link,
        "headroom": min(pcfg.mem.kv_gib, dcfg.mem.kv_gib),
        "prefill_sim": pre_sim,
        "prefill_config": pcfg,
        "prefill_rate": rate / x,
        # TTFT spread comes from the prefill queue; the transfer and the decode worker's first step add their means
        "percentiles": {
            **sim.percentiles[0],
            "ttft_ms": {
                k: v + transfer * 1000.0 + sim.percentiles[0]["ttft_ms"]["mean"]
                for k, v in pre_sim.percentiles[0]["ttft_ms"].items()
            },
        },
    }
    return Point(
        "disagg",
        dcfg,
        y,
        dp.c_lane,
        sim,
        ttft,
        dp.tpot,
        out_tps,
        total,
        used,
        ctx.misses(ttft[0], dp.tpot[0]),
        extra,
    )
