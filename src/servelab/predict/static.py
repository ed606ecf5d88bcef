"""Static mode: TTFT is one prefill step of B sequences of I tokens; TPOT is the mean decode step of B
sequences while their context grows from I to I+O (Simpson's rule over the start, middle and end of that
growth)."""

from math import ceil

from pydantic import BaseModel

from servelab.errors import ServelabError
from servelab.perfdb.db import PerfDB, perfdb_for
from servelab.predict.engines import EngineProfile
from servelab.predict.graph import StepShape, step_ops
from servelab.predict.memory import GIB, MemoryBreakdown, check_fits, kv_bytes_per_sequence_per_gpu
from servelab.predict.provenance import time_shares
from servelab.predict.step import add_counts, breakdown, priced_step
from servelab.specs import ModelSpec, Parallel, SystemSpec, check_precision


class StaticEstimate(BaseModel):
    mode: str = "static"
    model: str
    system: str
    backend: str
    parallel: str
    gpus: int
    batch: int
    isl: int
    osl: int
    ttft_ms: float
    ttft_ms_low: float
    ttft_ms_high: float
    tpot_ms: float
    tpot_ms_low: float
    tpot_ms_high: float
    output_tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    memory: dict
    provenance: dict
    breakdown: dict | None = None


def prepare(
    model: ModelSpec,
    system: SystemSpec,
    parallel: Parallel,
    max_num_batched_tokens: int = 8192,
    gpu_memory_utilization: float | None = None,
    fraction_of_free: bool = False,
    static_fraction: bool = False,
    max_num_seqs: int | None = None,
    max_cudagraph_capture_size: int | None = None,
) -> MemoryBreakdown:
    """Every check a deployment must pass before it is priced: parallel split, precision, memory (the keywords
    are predict.memory.memory_per_gpu's)."""
    parallel.validate(model)
    check_precision(model, system)
    return check_fits(
        model,
        system,
        parallel,
        max_num_batched_tokens=max_num_batched_tokens,
        gpu_memory_utilization=gpu_memory_utilization,
        fraction_of_free=fraction_of_free,
        static_fraction=static_fraction,
        max_num_seqs=max_num_seqs,
        max_cudagraph_capture_size=max_cudagraph_capture_size,
    )


def check_kv_capacity(
    model: ModelSpec, parallel: Parallel, mem: MemoryBreakdown, batch: int, context: int
) -> None:
    per_rank = ceil(batch / parallel.attn_dp)
    need = per_rank * kv_bytes_per_sequence_per_gpu(model, parallel, context) / GIB
    if need > mem.kv_gib:
        fit = mem.max_sequences(context, model, parallel)
        raise ServelabError(
            f"batch {batch} of {context} tokens needs {need:.1f} GiB of KV cache per GPU, "
            f"{mem.kv_gib:.1f} GiB is free after weights; at most {fit} sequences fit"
        )


def estimate_static(
    model: ModelSpec,
    system: SystemSpec,
    parallel: Parallel,
    engine: EngineProfile,
    batch: int,
    isl: int,
    osl: int,
    db: PerfDB | None = None,
    with_breakdown: bool = False,
) -> StaticEstimate:
    if batch < 1 or isl < 1 or osl < 1:
        raise ServelabError("batch, isl and osl must be at least 1")
    model = engine.model_as_served(model)
    engine = engine.running(model, system)  # the MoE terms where their fit reaches
    db = db or perfdb_for(system, engine.name)
    mem = prepare(
        model,
        system,
        parallel,
        engine.max_num_batched_tokens,
        **engine.kv_rule,
    )
    check_kv_capacity(model, parallel, mem, batch, isl + osl)
    micro = ceil(batch / parallel.pp)  # pipeline stages work on pp microbatches at once
    prefill_shape = StepShape(prefill=((isl, 0),) * micro)
    ttft = priced_step(model, parallel, prefill_shape, engine, db)
    sources = dict(ttft.sources)
    decode = []
    for kv in (isl, isl + osl // 2, isl + osl - 1):
        decode.append(
            priced_step(model, parallel, StepShape(decode_batch=micro, decode_kv_len=kv), engine, db)
        )
        for s, n in decode[-1].sources.items():
            sources[s] = sources.get(s, 0) + n
    # a request's kernel time: its prefill step, then osl - 1 decode steps (the middle one stands for them)
    source_us = add_counts(ttft.source_us, decode[1].source_us, max(osl - 1, 0))
    simpson = lambda f: (f(decode[0]) + 4 * f(decode[1]) + f(decode[2])) / 6000.0  # noqa: E731  us -> ms
    tpot, tpot_low, tpot_high = (
        simpson(lambda s: s.us),
        simpson(lambda s: s.low_us),
        simpson(lambda s: s.high_us),
    )
    ttft_ms = ttft.us / 1000.0
    total_s = (ttft_ms + tpot * max(osl - 1, 0)) / 1000.0
    result = StaticEstimate(
        model=model.name,
        system=system.name,
        backend=engine.name,
        parallel=parallel.label(),
        gpus=parallel.gpus,
        batch=batch,
        isl=isl,
        osl=osl,
        ttft_ms=ttft_ms,
        ttft_ms_low=ttft.low_us / 1000.0,
        ttft_ms_high=ttft.high_us / 1000.0,
        tpot_ms=tpot,
        tpot_ms_low=tpot_low,
        tpot_ms_high=tpot_high,
        output_tokens_per_s_per_gpu=batch * osl / total_s / parallel.gpus,
        tokens_per_s_per_user=1000.0 / tpot,
        memory=_memory_dict(mem),
        provenance={
            "ops_by_source": sources,
            "kernel_time_by_source": time_shares(source_us),
            "engine": engine.source,
        },
    )
    if with_breakdown:
        result.breakdown = {
            "prefill_us": breakdown(step_ops(model, parallel, prefill_shape), db),
            "decode_us": breakdown(
                step_ops(model, parallel, StepShape(decode_batch=micro, decode_kv_len=isl + osl // 2)), db
            ),
            "engine_overhead_us": {"prefill": ttft.overhead_us, "decode": decode[1].overhead_us},
        }
    return result


def _memory_dict(mem: MemoryBreakdown) -> dict:
    return {
        "weights_gib": round(mem.weights_gib, 3),
        "activations_gib": round(mem.activations_gib, 3),
        "reserve_gib": round(mem.reserve_gib, 3),
        "kv_cache_gib": round(mem.kv_gib, 3),
        "usable_gib": round(mem.total_gib, 3),
        "hbm_gib": mem.hbm_gib,
        "max_kv_tokens": mem.max_kv_tokens,
        "source": mem.source,
    }
