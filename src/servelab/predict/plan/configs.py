"""The engine configs a plan can deploy: parallel splits of a model that are valid, fit in memory and hold at
least one sequence of KV cache, each with its memoized step prices."""

from __future__ import annotations

from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.predict.memory import GIB, kv_bytes_per_sequence_per_gpu
from servelab.predict.plan.context import SearchContext
from servelab.predict.plan.points import EngineConfig
from servelab.predict.serving.pricing import StepPricer
from servelab.predict.static import prepare
from servelab.specs import ModelSpec, Parallel

MAX_LANE_CONCURRENCY = 1024
# Engines whose expert parallel spans every GPU of a pipeline stage or none (vLLM's --enable-expert-parallel,
# SGLang's --ep equal to --tp): a plan for them offers only those splits, so its picks can be launched.
FULL_STAGE_EP_ENGINES = {Engine.VLLM, Engine.SGLANG}


def enumerate_parallel(model: ModelSpec, max_gpus: int, divides: int | None = None) -> list[Parallel]:
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


def make_config(ctx: SearchContext, parallel: Parallel) -> EngineConfig | None:
    """The engine config of `parallel`, or None (with the reason in ctx.dropped) when it cannot serve."""
    if ctx.engine.name in FULL_STAGE_EP_ENGINES and parallel.ep not in (1, parallel.tp):
        ctx.dropped.append(
            f"{parallel.label()}: {ctx.engine.name} runs expert parallel over all {parallel.tp} GPUs of a "
            "stage or none"
        )
        return None
    try:
        mem = prepare(
            ctx.model,
            ctx.system,
            parallel,
            ctx.engine.max_num_batched_tokens,
            **ctx.engine.kv_rule,
        )
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
    return EngineConfig(parallel, mem, pricer, parallel.attn_dp * parallel.pp, cap)
