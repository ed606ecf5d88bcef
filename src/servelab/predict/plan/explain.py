"""Why a plan candidate wins: where its step time goes and which limit stops it from going further.

Limits are named from what the simulation saw (KV cache full, max_num_seqs reached, SLA at the next load) and
from the shape of its typical decode step: weights streamed once per step (bandwidth: weights), KV cache read
per sequence (bandwidth: KV cache), arithmetic (compute), collectives (communication), or CPU work per step
(engine overhead).
"""

from __future__ import annotations

import math
from typing import Any

from servelab.perfdb.roofline import Roofline
from servelab.predict.graph import StepShape, op_category, step_ops
from servelab.predict.plan.candidates import Candidate, Plan
from servelab.predict.plan.context import SearchContext
from servelab.predict.plan.points import EngineConfig, Point
from servelab.predict.plan.request import PlanError
from servelab.predict.serving.aggregated import representative_shapes
from servelab.predict.serving.workload import Workload
from servelab.predict.step import priced_step
from servelab.specs import Parallel


def step_split(ctx: SearchContext, parallel: Parallel, shape: StepShape) -> dict[str, float]:
    """Step time per category in us, engine overhead included."""
    st = priced_step(ctx.model, parallel, shape, ctx.engine, ctx.db)
    out: dict[str, float] = {}
    for op in step_ops(ctx.model, parallel, shape):
        cat = op_category(op.name).value
        out[cat] = out.get(cat, 0.0) + ctx.db.query(op.key).us * op.count
    out["engine overhead"] = st.overhead_us
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def decode_bottleneck(ctx: SearchContext, point: Point) -> str:
    """Classify the typical decode step by where its time goes: engine overhead, collectives, or (for the
    kernels) whether the roofline's compute time or its memory time is larger, and which op family moves the
    bytes."""
    cfg = point.config
    st = point.sim.stats
    n = max(1, round(st.decode_token_steps / st.decode_steps)) if st.decode_steps else 1
    shape = cfg.pricer.shape([], n, ctx.req.isl + ctx.req.osl // 2)
    split = step_split(ctx, cfg.parallel, shape)
    total = sum(split.values()) or 1.0
    if split.get("engine overhead", 0) / total > 0.3:
        return f"engine overhead ({100 * split['engine overhead'] / total:.0f}% of a decode step of {n})"
    if split.get("communication", 0) / total > 0.3:
        return f"communication ({100 * split['communication'] / total:.0f}% of a decode step of {n})"
    compute, memory = _roofline_terms(ctx, cfg.parallel, shape)
    if sum(compute.values()) > sum(memory.values()):
        return f"compute (decode step of {n}: roofline compute time exceeds memory time)"
    top = max(memory, key=lambda cat: memory[cat])
    what = {"attention": "KV cache", "moe": "expert weights", "gemm": "weights"}.get(top, "activations")
    share = 100 * memory[top] / sum(memory.values())
    return f"bandwidth: {what} (decode step of {n}, {share:.0f}% of its bytes)"


class _MemoryOnly(Roofline):
    """A roofline with infinite flops: an op's time is its memory time alone."""

    def _flops_rate(self, compute: str, kind: str = "gemm") -> float:
        return math.inf


def _roofline_terms(
    ctx: SearchContext, parallel: Parallel, shape: StepShape
) -> tuple[dict[str, float], dict[str, float]]:
    """Roofline compute-only and memory-only time per category (collectives left out): a roofline with
    infinite bandwidth gives the first, one with infinite flops the second. Used to name the bound, not to
    price."""
    compute_only, memory_only = Roofline(ctx.system), _MemoryOnly(ctx.system)
    compute_only.bw = math.inf
    compute: dict[str, float] = {}
    memory: dict[str, float] = {}
    for op in step_ops(ctx.model, parallel, shape):
        cat = op_category(op.name).value
        if cat == "communication":
            continue
        compute[cat] = compute.get(cat, 0.0) + compute_only.latency(op.key).us * op.count
        memory[cat] = memory.get(cat, 0.0) + memory_only.latency(op.key).us * op.count
    return compute, memory


def limits_of(ctx: SearchContext, point: Point) -> list[str]:
    """What bounds a point: KV capacity, max_num_seqs, the SLA at the next load tried, and its decode step."""
    out = []
    cfg, st = point.config, point.sim.stats
    if st.preemptions or st.blocked_kv:
        out.append(
            f"kv_capacity: KV cache full ({st.preemptions} preemptions, {st.blocked_kv} admissions waited)"
        )
    elif point.c_lane >= cfg.cap_lane and cfg.cap_lane < (ctx.engine.max_num_seqs // cfg.parallel.pp):
        out.append(
            f"kv_capacity: {cfg.cap_lane * cfg.lanes} sequences of {ctx.req.isl + ctx.req.osl} tokens fill it"
        )
    if st.blocked_seqs:
        out.append(f"max_num_seqs: {ctx.engine.max_num_seqs} reached")
    nxt = _next_miss(cfg, point.c_lane) if point.mode == "agg" else None
    if nxt:
        out.append(f"sla: {nxt}")
    out.append(decode_bottleneck(ctx, point))
    return out


def _next_miss(cfg: EngineConfig, c_lane: int) -> str | None:
    """What the next higher load tried for this config missed (that is why the search stopped here)."""
    higher = sorted(c for c in cfg.tried if c > c_lane)
    for c in higher:
        p = cfg.tried[c]
        if isinstance(p, str):
            return f"{p} at concurrency {c * cfg.lanes}"
        if p.misses:
            return f"{' and '.join(p.misses)} missed at concurrency {c * cfg.lanes}"
        return None
    return None


def explain(plan: Plan, rank: int) -> dict[str, Any]:
    """A structured explanation of the candidate with this rank."""
    by_rank = {c.rank: c for c in plan.candidates}
    if rank not in by_rank:
        ranks = ", ".join(str(r) for r in sorted(by_rank))
        raise PlanError(
            lambda name: f"{name('rank')}: no candidate of rank {rank} in this plan (ranks: {ranks})"
        )
    ctx, cand = plan.context, by_rank[rank]
    p = cand.point
    cfg = p.config
    wl = Workload(
        isl=ctx.req.isl,
        osl=ctx.req.osl,
        concurrency=max(1, cand.concurrency_per_replica),
        prefix_hit_rate=ctx.req.prefix_hit_rate,
        spec=ctx.spec,
    )
    decode_shape, mixed_shape = representative_shapes(cfg.pricer, wl, p.sim)
    st = p.sim.stats
    busy = st.busy_decode_s + st.busy_mixed_s
    time: dict[str, Any] = {
        "decode_worker" if p.disagg else "engine": {
            "share_in_prefill_steps": round(st.busy_mixed_s / busy, 3) if busy else 0.0,
            "share_in_decode_steps": round(st.busy_decode_s / busy, 3) if busy else 0.0,
            "mean_decode_batch_per_lane": round(st.decode_token_steps / st.decode_steps, 1)
            if st.decode_steps
            else 0,
        },
        "decode_step_us": _rounded(step_split(ctx, cfg.parallel, decode_shape)),
    }
    if p.disagg is None:
        time["prefill_step_us"] = _rounded(step_split(ctx, cfg.parallel, mixed_shape))
        time["decode_shape"] = _shape_dict(decode_shape)
        time["prefill_shape"] = _shape_dict(mixed_shape)
    else:
        d = p.disagg
        chunk = min(ctx.req.isl, ctx.engine.max_num_batched_tokens)
        prefill_shape = d.prefill.pricer.shape([(chunk, 0)], 0, 0)
        time["prefill_step_us"] = _rounded(step_split(ctx, d.prefill.parallel, prefill_shape))
        time["ttft_parts_ms"] = {
            "prefill_pool": round(d.prefill_ttft_ms, 2),
            "kv_transfer": round(d.kv_transfer_ms, 3),
            "decode_first_step": round(cand.ttft_ms - d.prefill_ttft_ms - d.kv_transfer_ms, 2),
        }
        time["prefill_rate_per_worker"] = round(d.prefill_rate, 3)
        time["kv_link"] = d.link
    return {
        "rank": rank,
        "mode": cand.mode,
        "parallel": cand.parallel["label"],
        "concurrency": cand.concurrency,
        "time": time,
        "limits": cand.limits,
        "versus": _versus(plan, cand),
    }


def _versus(plan: Plan, cand: Candidate) -> list[str]:
    lines = []
    others = [c for c in plan.candidates if c.rank != cand.rank]
    if cand.rank > 1:
        best = min(others, key=lambda c: c.rank)
        lines.append(
            f"rank 1 ({best.mode} {best.parallel['label']}) gives "
            f"{best.tok_s_per_gpu / cand.tok_s_per_gpu:.2f}x the tok/s/GPU"
        )
    nxt = [c for c in others if c.rank > cand.rank]
    if nxt:
        n = min(nxt, key=lambda c: c.rank)
        lines.append(
            f"{cand.tok_s_per_gpu / n.tok_s_per_gpu:.2f}x the tok/s/GPU of rank {n.rank} "
            f"({n.mode} {n.parallel['label']} at concurrency {n.concurrency})"
        )
    other_mode = [c for c in others if c.mode != cand.mode]
    if other_mode:
        o = min(other_mode, key=lambda c: c.rank)
        lines.append(
            f"best {o.mode}: rank {o.rank} ({o.parallel['label']}), "
            f"{cand.tok_s_per_gpu / o.tok_s_per_gpu:.2f}x slower per GPU than this one"
            if o.tok_s_per_gpu > cand.tok_s_per_gpu
            else f"best {o.mode}: rank {o.rank} ({o.parallel['label']}), this one gives "
            f"{cand.tok_s_per_gpu / o.tok_s_per_gpu:.2f}x its tok/s/GPU"
        )
    if cand.pareto:
        lines.append("on the Pareto front: no candidate is both faster per user and higher per GPU")
    return lines


def _rounded(d: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 1) for k, v in d.items()}


def _shape_dict(shape: StepShape) -> dict[str, int]:
    return {
        "prefill_chunks": len(shape.prefill),
        "prefill_tokens": sum(n for n, _ in shape.prefill),
        "decode_batch": shape.decode_batch,
        "decode_kv_len": shape.decode_kv_len,
    }
