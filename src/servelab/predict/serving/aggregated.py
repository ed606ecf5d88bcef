"""Aggregated serving: one engine does prefill and decode; its steady state comes from simulating it.

`simulate` is the fast core the planner calls many times (it returns plain numbers); `estimate_aggregated`
wraps it into the same JSON as static mode plus percentiles, for `servelab estimate --mode agg`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from operator import attrgetter, sub, truediv

from servelab.errors import ServelabError
from servelab.metrics import Distribution, distribution_ms, weighted_distribution_ms
from servelab.perfdb.db import PerfDB, perfdb_for
from servelab.predict.engines import EngineProfile
from servelab.predict.graph import step_ops
from servelab.predict.memory import GIB, MemoryBreakdown, kv_bytes_per_sequence_per_gpu
from servelab.predict.provenance import time_shares
from servelab.predict.serving.engine import Lane, LaneLimits, LaneStats
from servelab.predict.serving.kept import kept_sims, stats_of
from servelab.predict.serving.pricing import StepPricer
from servelab.predict.serving.simulator import ClosedLoop, OpenLoop, Source, run, without_gc
from servelab.predict.serving.ttft_explain import StepLog, explain_ttft, watcher
from servelab.predict.serving.workload import SpecDecoding, Workload
from servelab.predict.static import StaticEstimate, _memory_dict, prepare
from servelab.predict.step import add_counts, breakdown, priced_step
from servelab.specs import ModelSpec, Parallel, SystemSpec

CLOCKS = ("nominal", "low", "high")
PERCENTILES = (50, 90, 99)  # reported by estimate and read by the planner's SLA statistics
METRICS = ("ttft_ms", "tpot_ms", "e2el_ms", "itl_ms")  # the distributions a simulation reports, in order
STEADY_RATES = (
    "Little's law on the simulated latencies: clients / mean E2EL requests/s, x OSL output tokens/s"
)
WINDOW_RATES = "counted over the measuring window"


@dataclass
class SimResult:
    """Metrics of one simulated load on one replica; tuples are per clock (nominal, low, high)."""

    output_tps: tuple  # output tokens/s of the replica
    request_tps: tuple  # requests/s of the replica
    lanes: int
    lane_workload: Workload
    stats: LaneStats  # of the simulated lane (nominal run)
    requests: int
    wall_ms: float
    kv_max_sequences: int  # sequences of isl + osl tokens the replica's KV cache holds
    # per clock: the measured requests' latencies in seconds by metric (ttft, tpot, e2el) and the lane's ITL
    # runs, from which each distribution is made when first asked: a plan reads one or two statistics of most
    # of its simulations and the whole percentiles of a few
    samples: tuple = ()
    _distributions: dict = field(default_factory=dict, repr=False)

    def distribution(self, name: str, clock: int = 0) -> dict[str, float]:
        """{mean, p50, p90, p99} of one metric (ttft_ms, tpot_ms, e2el_ms, itl_ms) at one clock."""
        got = self._distributions.get((name, clock))
        if got is None:
            latencies_s, itl = self.samples[clock]
            if name == "itl_ms":
                dist = weighted_distribution_ms([(d[clock], w) for d, w in itl], PERCENTILES)
            else:
                dist = distribution_ms(latencies_s[name.removesuffix("_ms")], PERCENTILES)
            got = self._distributions[(name, clock)] = _stats(dist)
        return got

    @property
    def percentiles(self) -> tuple:
        """Per clock: {ttft_ms: {mean, p50, p90, p99}, tpot_ms: ..., e2el_ms: ..., itl_ms: ...}."""
        return tuple(
            {name: self.distribution(name, clock) for name in METRICS} for clock in range(len(self.samples))
        )

    def metric(self, name: str, stat: str = "mean", clock: int = 0) -> float:
        return self.distribution(name, clock)[stat]


def steady_rates(sim: SimResult, clients: int, osl: int) -> SimResult:
    """`sim` (a closed loop of `clients`) with its request and output rates by Little's law on its own
    latencies: `clients` requests always in flight, each for the mean E2EL, so clients / E2EL requests/s, each
    of `osl` output tokens (the prefill-bound split's rule, plan.split._prefill_bound). The planner's decode
    workers and aggregated replicas both take their rates from it.

    Not the simulation's window: it opens when the first warm-up request finishes, closes when the last
    measured one does, and counts every completion between, so the rest of the first wave, whose decoding was
    mostly done before the window opened, counts in it. Requests that start together decode in step, so the
    planner's short window (a lane's C, at least 24, after C of warm-up) was 9-31 % above a window of 30 x C
    requests after 3 x C of warm-up for decode workers and 7-21 % for aggregated replicas (Qwen3-32B and
    DeepSeek-R1, 4-256 clients); this rate is within 4 % of it, at no cost (docs/accuracy.md, "The decode
    worker's rate by Little's law" and "The aggregated points' rate by Little's law too")."""
    clock_count = len(sim.request_tps)
    request_tps = tuple(clients / (sim.metric("e2el_ms", "mean", k) / 1000.0) for k in range(clock_count))
    return replace(sim, request_tps=request_tps, output_tps=tuple(r * osl for r in request_tps))


def lane_limits(
    model: ModelSpec,
    parallel: Parallel,
    engine: EngineProfile,
    mem: MemoryBreakdown,
    wl: Workload,
    ranks: int | None = None,
) -> LaneLimits:
    """What one lane's scheduler works with. KV bytes per sequence are affine in its length (fixed windows and
    compressor state + per-token growth), fitted at the workload's full length. The replica's one API server
    serves every lane in turn: each lane sees it `lanes` times slower. `ranks`: the attention-DP ranks that
    get requests (None: all); the lane steps together with them only when every rank has requests (an idle
    rank has no decodes to protect, which is what a policy that holds new prompts for the others asks)."""
    length = wl.isl + wl.osl
    lanes = parallel.attn_dp * parallel.pp
    ranks = parallel.attn_dp if ranks is None else ranks
    per_token = mem.kv_bytes_per_token
    fixed = max(0.0, kv_bytes_per_sequence_per_gpu(model, parallel, length) - per_token * length)
    return LaneLimits(
        max_num_batched_tokens=engine.max_num_batched_tokens,
        max_num_seqs=max(1, engine.max_num_seqs // parallel.pp),  # one scheduler feeds pp microbatches
        chunked_prefill=engine.chunked_prefill,
        kv_capacity=max(mem.kv_gib, 0.0) * GIB / parallel.pp,
        kv_fixed=fixed,
        kv_per_token=per_token,
        tokens_per_step=wl.spec.tokens_per_step,
        verify_tokens=1 + wl.spec.draft_tokens,
        frontend_s=engine.api_request_us * 1e-6 * lanes,
        frontend_token_s=engine.api_prompt_token_us * 1e-6 * lanes,
        frontend_out_token_s=engine.api_output_token_us * 1e-6 * lanes,
        frontend_step_s=engine.api_step_us * 1e-6 * lanes,
        frontend_chunk_s=engine.api_chunk_us * 1e-6 * lanes,
        stream_interval=engine.stream_interval,
        dp_ranks=parallel.attn_dp if ranks == parallel.attn_dp else 1,
    )


def simulate(
    model: ModelSpec,
    parallel: Parallel,
    engine: EngineProfile,
    mem: MemoryBreakdown,
    wl: Workload,
    pricer: StepPricer,
    *,
    prefilled: bool = False,
    osl_override: int | None = None,
    watch: Callable[[Lane, Source], None] | None = None,
) -> SimResult:
    """Simulate one lane under its share of the load and scale to the replica; an earlier process's answer
    to the same question where the pricer's PerfDB keeps one (servelab.predict.serving.kept).

    prefilled: requests arrive with their prompt already in the KV cache and their first token sampled (a
    disaggregated decode worker): where the engine's policy says so they join the decoding batch, whose next
    step samples their second token; otherwise a one-token prompt chunk samples the first.

    watch: called with the nominal run's lane and source before it runs (ttft_explain.StepLog); a watched
    simulation is run, never read from the kept ones."""
    t0 = time.perf_counter()
    kept = None if watch else kept_sims(model, parallel, engine, mem, pricer)
    if kept is None:
        return without_gc(_simulate, model, parallel, engine, mem, wl, pricer, prefilled, t0, watch)
    tag = kept.tag(wl, prefilled, osl_override, pricer)
    found = _from_kept(kept.get(tag), parallel, wl, pricer, t0)
    if found is not None:
        return found
    priced = pricer.priced
    sim = without_gc(_simulate, model, parallel, engine, mem, wl, pricer, prefilled, t0)
    kept.add(tag, sim, pricer.priced - priced)
    return sim


def _from_kept(
    value: tuple | None, parallel: Parallel, wl: Workload, pricer: StepPricer, t0: float
) -> SimResult | None:
    """The SimResult kept as `value` (KeptSims.add's tuple), the shapes its simulation priced counted on
    `pricer` as the simulation counted them; None where there is none or it is malformed."""
    if value is None:
        return None
    output_tps, request_tps, lanes, stats, requests, kv_max_sequences, samples, distributions, priced = value
    lane_stats = stats_of(stats)
    if lane_stats is None or lanes != parallel.attn_dp * parallel.pp or type(samples) is not tuple:
        return None
    if type(distributions) is not dict or type(priced) is not int:
        return None
    pricer.priced += priced
    return SimResult(
        output_tps,
        request_tps,
        lanes,
        wl.per_lane(lanes),
        lane_stats,
        requests,
        (time.perf_counter() - t0) * 1000.0,
        kv_max_sequences,
        samples,
        distributions,
    )


def _simulate(
    model: ModelSpec,
    parallel: Parallel,
    engine: EngineProfile,
    mem: MemoryBreakdown,
    wl: Workload,
    pricer: StepPricer,
    prefilled: bool,
    t0: float,
    watch: Callable[[Lane, Source], None] | None = None,
) -> SimResult:
    lanes = parallel.attn_dp * parallel.pp
    lw = wl.per_lane(lanes)
    ranks = min(wl.clients, parallel.attn_dp) if wl.closed else None  # fewer clients leave ranks idle
    limits = lane_limits(model, parallel, engine, mem, wl, ranks)
    if prefilled:  # the request went through the API server of the prefill worker
        limits = limits.without_api_server()
    one_seq = limits.kv_fixed + (wl.isl + wl.osl) * limits.kv_per_token
    if one_seq > limits.kv_capacity:
        raise ServelabError(
            f"{model.name} ({parallel.label()}): one sequence of {wl.isl + wl.osl} tokens needs "
            f"{one_seq / GIB:.2f} GiB of KV cache per GPU, {limits.kv_capacity / GIB:.2f} GiB is free"
        )
    kv_seqs = int(limits.kv_capacity // one_seq) * lanes
    # prefilled: the prompt's KV and its first token arrived and the request joins the decoding batch, or (an
    # engine that computes the last prompt token again) its step samples the first token
    joins = prefilled and engine.policy.joins_arrived_requests()
    src_kw: dict = {}
    if joins:
        src_kw = {"prompt": wl.isl, "cached": wl.isl, "arrived": True}
    elif prefilled:
        src_kw = {"prompt": wl.isl + 1, "cached": wl.isl}
    runs = []
    for drive in (0,) if wl.closed else (0, 1, 2):
        lane = Lane(limits, engine.policy, pricer.decode, pricer.mixed, joins=joins)
        source = ClosedLoop(lw, **src_kw) if wl.closed else OpenLoop(lw, drive=drive, **src_kw)
        if watch is not None and drive == 0:
            watch(lane, source)
        run(lane, source)
        runs.append((lane, source))
    samples, out_tps, req_tps = [], [], []
    scale = (wl.clients / lw.clients) if wl.closed else lanes  # lanes x the busiest lane's share
    per_run = []
    for _lane, source in runs:
        per_run.append(request_latencies_s(source.measured_requests()))
    for clock in range(3):
        lane, source = runs[0] if wl.closed else runs[clock]
        latencies_s = per_run[0][clock] if wl.closed else per_run[clock][clock]
        samples.append((latencies_s, lane.stats.itl))
        # throughput over the window: everything emitted and completed in it, measured or not (Little's law
        # holds)
        (c_start, e_start, n_start), (c_end, e_end, n_end) = source.window
        span = max(c_end[clock] - c_start[clock], 1e-12)
        out_tps.append((e_end - e_start) / span * scale)
        req_tps.append((n_end - n_start) / span * scale)
    lane0 = runs[0][0]
    return SimResult(
        tuple(out_tps),
        tuple(req_tps),
        lanes,
        lw,
        lane0.stats,
        len(runs[0][1].requests),
        (time.perf_counter() - t0) * 1000.0,
        kv_seqs,
        tuple(samples),
    )


def request_latencies_s(requests) -> list[dict[str, list[float]]]:
    """Per-request TTFT, TPOT and E2EL in seconds, one dict per clock (0 nominal, 1 low, 2 high).

    servelab.metrics' ttft, tpot and e2el, a column at a time: the same subtractions and divisions, without
    a call per value (nine thousand of them for a thousand requests, 4 % of the simulation)."""
    if not requests:
        return [{"ttft": [], "tpot": [], "e2el": []} for _ in range(3)]
    # per clock: every request's time (attrgetter: the loops over the requests run in C)
    arrivals = zip(*map(attrgetter("arrival"), requests), strict=True)
    firsts = zip(*map(attrgetter("first"), requests), strict=True)
    finishes = zip(*map(attrgetter("finish"), requests), strict=True)
    tokens = [r.osl - 1 for r in requests]  # tpot's divisor; no TPOT for a single output token
    every = min(tokens) > 0
    out = []
    for start, first, last in zip(arrivals, firsts, finishes, strict=True):
        if every:
            tpots = list(map(truediv, map(sub, last, first), tokens))
        else:
            tpots = [(b - a) / n for a, b, n in zip(first, last, tokens, strict=True) if n > 0]
        out.append({"ttft": list(map(sub, first, start)), "tpot": tpots, "e2el": list(map(sub, last, start))})
    return out


def _stats(d: Distribution) -> dict[str, float]:
    """The statistics estimate reports per metric: mean and p50, p90, p99, in ms."""
    return {"mean": d.mean, **{f"p{word}": v for word, v in d.percentiles.items()}}


class AggregatedEstimate(StaticEstimate):
    """Static mode's fields (batch = closed-loop concurrency) plus the simulated distributions and bands."""

    mode: str = "agg"
    request_rate: float | None = None  # open loop: requests/s offered
    percentiles: dict
    percentiles_low: dict
    percentiles_high: dict
    output_tokens_per_s_per_gpu_low: float  # note: the low clock (faster steps) gives the high throughput
    output_tokens_per_s_per_gpu_high: float
    total_tokens_per_s_per_gpu: float
    request_throughput: float
    scheduler: dict
    workload: dict
    explain: dict | None = None  # the predicted TTFT split by term (`--explain`, ttft_explain)


def estimate_aggregated(
    model: ModelSpec,
    system: SystemSpec,
    parallel: Parallel,
    engine: EngineProfile,
    batch: int,
    isl: int,
    osl: int,
    db: PerfDB | None = None,
    with_breakdown: bool = False,
    *,
    rate: float | None = None,
    burstiness: float = 1.0,
    num_requests: int | None = None,
    prefix_hit_rate: float = 0.0,
    spec_tokens: int = 0,
    acceptance: float = 0.7,
    seed: int = 0,
    workload: Workload | None = None,
    gpu_memory_utilization: float | None = None,
    explain: dict[str, float] | None = None,
) -> AggregatedEstimate:
    """Steady state of one replica at closed-loop concurrency `batch` (or open-loop `rate` requests/s).
    gpu_memory_utilization: the engine's memory share (TensorRT-LLM: the share of free memory for KV; SGLang:
    mem_fraction_static); None: the engine's own default. explain: the engine terms its calibration fits
    (engines.fitted_params), to split the predicted TTFT by term (`explain`, ttft_explain); None: no split."""
    if batch < 1 or isl < 1 or osl < 1:
        raise ServelabError("batch, isl and osl must be at least 1")
    model = engine.model_as_served(model)
    engine = engine.running(model, system)  # the MoE terms where their fit reaches
    # the steady state of a closed loop takes its rates by Little's law, as the planner's points do; a given
    # workload (a benchmark from idle) and an open loop keep their measuring window, as a benchmark counts it
    steady = workload is None and not rate
    if workload is None:
        workload = Workload(
            isl=isl,
            osl=osl,
            concurrency=None if rate else batch,
            rate=rate,
            burstiness=burstiness,
            num_requests=num_requests,
            prefix_hit_rate=prefix_hit_rate,
            seed=seed,
            spec=SpecDecoding(draft_tokens=spec_tokens, acceptance=acceptance),
        )
    # with a separate draft model (no MTP layers) the step model prices the verification; the draft's own cost
    # is not modelled
    db = db or perfdb_for(system, engine.name)
    mem = prepare(
        model,
        system,
        parallel,
        engine.max_num_batched_tokens,
        gpu_memory_utilization,
        **engine.kv_rule,
    )
    # a closed loop of fewer clients than attention-DP ranks leaves ranks idle
    ranks = min(workload.clients, parallel.attn_dp) if workload.closed else 0
    pricer = StepPricer(model, parallel, engine, db, spec_tokens=workload.spec.draft_tokens, ranks=ranks)
    logs: list[StepLog] = []
    watch = None if explain is None else watcher(logs)
    sim = simulate(model, parallel, engine, mem, workload, pricer, watch=watch)
    if steady:
        sim = steady_rates(sim, batch, osl)
    result = to_estimate(model, system, parallel, engine, mem, workload, sim, pricer, db, with_breakdown)
    result.provenance["simulation"]["rates"] = STEADY_RATES if steady else WINDOW_RATES
    if explain is not None:
        result.explain = explain_ttft(logs, logs[0].source.measured_requests(), pricer, explain)
    return result


def to_estimate(
    model,
    system,
    parallel,
    engine,
    mem,
    wl: Workload,
    sim: SimResult,
    pricer: StepPricer,
    db,
    with_breakdown: bool = False,
) -> AggregatedEstimate:
    p, lo, hi = sim.percentiles
    gpus = parallel.gpus
    st = sim.stats
    rep_decode, rep_mixed = representative_shapes(pricer, wl, sim)
    sources: dict = {}
    source_us: dict = {}
    # each representative step weighted by the time the simulation spent in steps of its kind
    for shape, busy in ((rep_decode, st.busy_decode_s), (rep_mixed, st.busy_mixed_s)):
        step = priced_step(model, parallel, shape, pricer.engine, db)
        sources = add_counts(sources, step.sources)
        if step.kernel_us > 0:
            source_us = add_counts(source_us, step.source_us, busy / step.kernel_us)
    tpot = p["tpot_ms"]["mean"] if wl.osl > 1 else p["itl_ms"]["mean"]
    result = AggregatedEstimate(
        model=model.name,
        system=system.name,
        backend=engine.name,
        parallel=parallel.label(),
        gpus=gpus,
        batch=wl.concurrency or 0,
        request_rate=wl.rate,
        isl=wl.isl,
        osl=wl.osl,
        ttft_ms=p["ttft_ms"]["mean"],
        ttft_ms_low=lo["ttft_ms"]["mean"],
        ttft_ms_high=hi["ttft_ms"]["mean"],
        tpot_ms=tpot,
        tpot_ms_low=lo["tpot_ms"]["mean"],
        tpot_ms_high=hi["tpot_ms"]["mean"],
        output_tokens_per_s_per_gpu=sim.output_tps[0] / gpus,
        output_tokens_per_s_per_gpu_low=sim.output_tps[1] / gpus,
        output_tokens_per_s_per_gpu_high=sim.output_tps[2] / gpus,
        total_tokens_per_s_per_gpu=(sim.output_tps[0] + sim.request_tps[0] * wl.isl) / gpus,
        request_throughput=sim.request_tps[0],
        tokens_per_s_per_user=1000.0 / tpot if tpot > 0 else 0.0,
        memory=_memory_dict(mem),
        provenance={
            "ops_by_source": sources,
            "kernel_time_by_source": time_shares(source_us),
            "engine": engine.source,
            "simulation": {
                "lanes": sim.lanes,
                "requests_simulated": sim.requests * (1 if wl.closed else 3),
                "steps": st.steps,
                "shapes_priced": pricer.priced,
                "wall_ms": round(sim.wall_ms, 2),
                "bands": "same schedule priced with the step model's low and high times"
                if wl.closed
                else "open loop re-run with low and high step times",
            },
        },
        percentiles=p,
        percentiles_low=lo,
        percentiles_high=hi,
        scheduler=scheduler_dict(sim),
        workload=wl.model_dump(mode="json"),
    )
    if with_breakdown:
        result.breakdown = {
            "prefill_us": breakdown(step_ops(model, parallel, rep_mixed), db),
            "decode_us": breakdown(step_ops(model, parallel, rep_decode), db),
            "engine_overhead_us": {
                "prefill": priced_step(model, parallel, rep_mixed, pricer.engine, db).overhead_us,
                "decode": priced_step(model, parallel, rep_decode, pricer.engine, db).overhead_us,
            },
            "shapes": {"mixed": rep_mixed._asdict(), "decode": rep_decode._asdict()},
        }
    return result


def representative_shapes(pricer: StepPricer, wl: Workload, sim: SimResult):
    """A typical decode step (mean batch, mid-generation context) and a typical prefill-carrying step."""
    st = sim.stats
    mean_batch = max(1, round(st.decode_token_steps / st.decode_steps)) if st.decode_steps else 1
    kv = wl.isl + wl.osl // 2
    chunk = min(max(wl.isl - wl.cached_tokens, 1), pricer.engine.max_num_batched_tokens)
    decode = pricer.shape([], mean_batch, kv)
    mixed = pricer.shape([(chunk, wl.cached_tokens)], max(0, mean_batch - 1), kv)
    return decode, mixed


def scheduler_dict(sim: SimResult) -> dict:
    st = sim.stats
    busy = st.busy_decode_s + st.busy_mixed_s
    return {
        "lanes": sim.lanes,
        "lane_concurrency": sim.lane_workload.concurrency,
        "mean_decode_batch_per_lane": round(st.decode_token_steps / st.decode_steps, 2)
        if st.decode_steps
        else 0.0,
        "time_in_prefill_steps": round(st.busy_mixed_s / busy, 4) if busy else 0.0,
        "preemptions": st.preemptions,
        "admissions_blocked_by_kv": st.blocked_kv,
        "admissions_blocked_by_max_num_seqs": st.blocked_seqs,
        "peak_kv_utilization": round(st.peak_kv_frac, 4),
        "kv_max_sequences": sim.kv_max_sequences,
    }
