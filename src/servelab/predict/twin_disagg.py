"""The simulated twin of a benchmark on a disaggregated deployment (`servelab bench --simulate` with
--prefill-* / --decode-*): the aggregated twin's request stream (servelab.predict.twin.BenchStream, the same
client) through a prefill pool and a decode pool simulated together, request by request
(servelab.predict.serving.disagg), summarised by the metrics module a real run uses.

The pools are the planner's engine configs of the given split (predict.plan.split.pool_config: the same
validation, memory and step prices as `servelab estimate --mode disagg`); a prefill worker's lanes keep their
API server, a decode worker's have none (the request came through the prefill side, as in the estimate's
decode simulation); each request's KV transfer is priced by predict.plan.disagg.kv_transfer_tokens_s (the
estimate's rule at that request's prompt). A disaggregated prediction claims no band (predict.bands).
"""

from __future__ import annotations

from pathlib import Path

from servelab.errors import ServelabError
from servelab.perfdb.db import PerfDB
from servelab.predict.bands import DISAGG_NO_CLAIM
from servelab.predict.engines import EngineProfile
from servelab.predict.plan.disagg import (
    LINK_EFFICIENCY,
    TRANSFER_FLOOR_S,
    decode_worker,
    kv_transfer_tokens_s,
)
from servelab.predict.plan.points import EngineConfig
from servelab.predict.plan.split import Split, pool_config, split_context
from servelab.predict.serving.aggregated import lane_limits
from servelab.predict.serving.disagg import DisaggRun, RouterPolicy, run_disagg
from servelab.predict.serving.engine import Lane, LaneLimits, Request
from servelab.predict.serving.simulator import Replay
from servelab.predict.serving.workload import Workload
from servelab.predict.static import _memory_dict
from servelab.predict.twin import (
    BenchStream,
    EngineSettings,
    TwinRun,
    band,
    check_fits,
    client_latency,
    engine_limits,
    op_sources,
    serving_band,
    summary_of,
    times,
    twin_engine,
)
from servelab.specs import ModelSpec, SystemSpec

ROUTER_RULES = {
    "round-robin": "requests to each pool's workers in turn (vLLM production-stack's PD router)",
    "least-loaded": "to the worker with the least outstanding work: prompt tokens to prefill, requests held "
    "in decode (Dynamo's least-loaded mode)",
}


def simulate_disagg_benchmark(
    model: ModelSpec,
    system: SystemSpec,
    split: Split,
    settings: EngineSettings,
    stream: BenchStream,
    router: RouterPolicy,
    percentile_metrics: list[str],
    percentiles: list[float],
    goodput_ms: dict[str, float],
    calibration: Path | None = None,
    db: PerfDB | None = None,
) -> TwinRun:
    """Replay `stream` on the split and summarise it as `servelab bench` summarises a measured run."""
    _refuse_unmodelled(settings)
    engine = twin_engine(settings, system, calibration)
    model = engine.model_as_served(model)
    engine = engine.running(model, system)  # the MoE terms where their fit reaches
    lengths = stream.lengths()
    isl, osl = max(p for p, _ in lengths), max(o for _, o in lengths)
    ctx = split_context(model, system, engine, split, isl, osl)
    if db is not None:
        ctx.db = db
    pcfg = pool_config(ctx, split.prefill, "prefill")
    dcfg = decode_worker(ctx, pool_config(ctx, split.decode, "decode"))  # the estimate's decode worker
    wl = Workload(isl=isl, osl=osl, concurrency=1)
    p_limits = lane_limits(model, pcfg.parallel, engine, pcfg.mem, wl)
    d_limits = lane_limits(model, dcfg.parallel, engine, dcfg.mem, wl).without_api_server()
    check_fits(model, f"prefill pool, {split.prefill.label()}", p_limits, isl + 1)
    check_fits(model, f"decode pool, {split.decode.label()}", d_limits, max(p + o for p, o in lengths))
    transfers: dict[int, float] = {}

    def transfer_s(prompt: int) -> float:
        got = transfers.get(prompt)
        if got is None:
            got = transfers[prompt] = kv_transfer_tokens_s(
                model, system, prompt, split.prefill.gpus, split.decode.gpus, split.gpus
            )[0]
        return got

    joins = engine.policy.joins_arrived_requests()
    specs = [(p, o, 0) for p, o in lengths]
    offsets = stream.offsets()
    runs: dict[int, DisaggRun] = {}
    itl: list = []
    steps = {"prefill": 0, "decode": 0}
    for drive in (0, 1, 2):  # the pools' steps interleave by their times: one run per clock
        pre = _pool(pcfg, split.prefill_workers, p_limits, engine, joins=False)
        dec = _pool(dcfg, split.decode_workers, d_limits, engine, joins=joins)
        client = Replay(specs, offsets, stream.max_concurrency, drive)
        runs[drive] = run_disagg(pre, dec, client, transfer_s, router)
        if drive == 0:
            itl = [(d[0], w) for worker in dec for lane in worker for d, w in lane.stats.itl]
            steps = {
                "prefill": sum(lane.stats.steps for worker in pre for lane in worker),
                "decode": sum(lane.stats.steps for worker in dec for lane in worker),
            }
    prompts = [p for p, _ in lengths]
    per_clock = {k: run.requests for k, run in runs.items()}
    reqs = [times(r, 0, p) for r, p in zip(per_clock[0], prompts, strict=True)]
    clocks = band(per_clock, False, prompts)
    _, link = kv_transfer_tokens_s(model, system, 1, split.prefill.gpus, split.decode.gpus, split.gpus)
    streams = min(split.prefill.gpus, split.decode.gpus)
    return TwinRun(
        requests=reqs,
        summary=summary_of(reqs, itl, percentile_metrics, percentiles, goodput_ms),
        client_latency_ms=client_latency(reqs, offsets, percentiles),
        deployment={
            "model": model.name,
            "system": system.name,
            "mode": "disagg",
            "gpus": split.gpus,
            "parallel": split.label(),
            "prefill": _pool_dict(split.prefill_workers, pcfg),
            "decode": _pool_dict(split.decode_workers, dcfg),
            "router": router,
            "precision": model.precision.model_dump(mode="json"),
            **settings.model_dump(),
            "enable_prefix_caching": False,  # no reuse is modelled here (_refuse_unmodelled)
            **engine_limits(engine),
        },
        provenance={
            "engine_profile": engine.source,
            "prefill": _pool_sources(pcfg, engine, ctx.db, model, [(p, 1) for p in prompts], ("prefill",)),
            "decode": _pool_sources(dcfg, engine, ctx.db, model, lengths, ("decode",)),
            "kv_transfer": {
                "link": link,
                "how": f"roofline over {link} at efficiency {LINK_EFFICIENCY:.2f} x {streams} streams "
                f"(min of the pools' GPUs per worker) + {TRANSFER_FLOOR_S * 1e6:.0f} us, per request at its "
                "prompt; transfers do not share the link",
            },
            "router": {"policy": router, "rule": ROUTER_RULES[router]},
            "ttft_parts_ms": ttft_parts_ms(runs[0]),
            "decode_joins": joins,
            "band": clocks,
            "serving_band": serving_band(clocks, engine.name, calibration, DISAGG_NO_CLAIM),
            "simulation": "every lane of both pools in one event loop (servelab.predict.serving.disagg), "
            "re-run per clock",
            "steps": steps,
            "shapes_priced": pcfg.pricer.priced + dcfg.pricer.priced,
        },
    )


def _refuse_unmodelled(settings: EngineSettings) -> None:
    """Engine settings the disaggregated twin does not model: one line naming the option."""
    unmodelled = {
        "num_speculative_tokens": settings.num_speculative_tokens != 0,
        "enable_prefix_caching": settings.enable_prefix_caching is True,
        "gpu_memory_utilization": settings.gpu_memory_utilization is not None,
    }
    for name, given in unmodelled.items():
        if given:
            raise ServelabError(
                "not simulated for a disaggregated deployment (its pools take the engine's defaults, as "
                "estimate --mode disagg does)",
                field=name,
            )


def _pool(
    cfg: EngineConfig, workers: int, limits: LaneLimits, engine: EngineProfile, joins: bool
) -> list[list[Lane]]:
    """Fresh lanes of a pool: per worker, one per attention-DP rank."""
    return [
        [
            Lane(limits, engine.policy, cfg.pricer.decode, cfg.pricer.mixed, joins=joins)
            for _ in range(cfg.lanes)
        ]
        for _ in range(workers)
    ]


def _pool_dict(workers: int, cfg: EngineConfig) -> dict:
    p = cfg.parallel
    return {"parallel": p.label(), "tp": p.tp, "ep": p.ep, "dp_attn": p.dp_attn, "workers": workers}


def _pool_sources(cfg: EngineConfig, engine, db, model, lengths, phases: tuple[str, ...]) -> dict:
    """Where a pool's op latencies came from, over the steps it runs, and its memory."""
    counts, shares = op_sources(cfg.pricer, model, cfg.parallel, engine, db, lengths, phases)
    return {
        "ops_by_source": counts,
        "kernel_time_by_source": shares,
        "memory": _memory_dict(cfg.mem),
        "lanes": cfg.lanes,
    }


def ttft_parts_ms(run: DisaggRun) -> dict[str, float]:
    """The mean TTFT in its parts (nominal clock): send to prefill end (the router, the prefill worker's API
    server, queue and prefill), the KV transfer, and KV arrival to the first token at the client (the decode
    worker's wait for a seat and for the step in progress, or its one-token step)."""
    reqs: list[Request] = run.requests
    n = len(reqs)
    parts = {"prefill_queue_and_prefill": 0.0, "kv_transfer": 0.0, "decode_wait_and_first_token": 0.0}
    for r in reqs:
        done, arrived = run.prefill_done[r.idx], run.kv_arrived[r.idx]
        parts["prefill_queue_and_prefill"] += done - r.arrival[0]
        parts["kv_transfer"] += arrived - done
        parts["decode_wait_and_first_token"] += r.first[0] - arrived  # type: ignore[index]
    return {name: 1000.0 * total / n for name, total in parts.items()}
