"""The simulated twin of a benchmark (`servelab bench --simulate`): the request stream a random-dataset run of
`servelab bench` would send, replayed through the serving simulator on a given deployment, summarised by the
metrics module the real run uses.

The stream is the real run's: lengths by servelab.traffic.lengths from the same seed (the prompt is the
random prefix plus the drawn body; no special tokens, the engine sees the drawn length), send offsets by
servelab.traffic.schedule (every client starts at t=0 in a closed loop), the same number of prompts. Warm-ups
finish before the measured run starts (the real run waits for them), so they only leave the prefix cache
warm. What is modelled and what is not is listed in docs/bench.md, "Simulated twin".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from servelab.engines import MODELLED, Engine
from servelab.engines.defaults import engine_defaults
from servelab.engines.policy import SchedulingPolicy
from servelab.errors import ServelabError, closest
from servelab.metrics import (
    Distribution,
    RequestTimes,
    ServingSummary,
    distribution_ms,
    summarize,
    weighted_distribution_ms,
)
from servelab.perfdb.db import PerfDB, perfdb_for
from servelab.predict.band_domain import Asked
from servelab.predict.bands import attach_band, twin_band_line
from servelab.predict.engines import EngineProfile, engine_profile, fitted_params
from servelab.predict.memory import GIB
from servelab.predict.provenance import time_shares as shares_of
from servelab.predict.serving.aggregated import lane_limits
from servelab.predict.serving.engine import Lane, LaneLimits, Request
from servelab.predict.serving.pricing import StepPricer
from servelab.predict.serving.simulator import Replay, run
from servelab.predict.serving.ttft_explain import StepLog, explain_ttft, watcher
from servelab.predict.serving.workload import SpecDecoding, Workload
from servelab.predict.static import _memory_dict, prepare
from servelab.predict.step import add_counts, priced_step
from servelab.specs import ModelSpec, Parallel, SystemSpec
from servelab.traffic.lengths import RangeRule, sample_lengths
from servelab.traffic.schedule import arrival_offsets, split_limit

TWIN_ENGINES = tuple(e.value for e in MODELLED)
CLOCKS = ("nominal", "low", "high")


class EngineSettings(BaseModel):
    """The engine flags that shape scheduling; None keeps the engine profile's documented default."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    engine: str = Engine.VLLM.value
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    # the largest step a CUDA graph replays: vLLM's --max-cudagraph-capture-size (tokens), SGLang's
    # --cuda-graph-max-bs (a decode batch); None: the engine's own rule
    max_cudagraph_capture_size: int | None = Field(None, ge=1)
    chunked_prefill: bool | None = None
    block_size: int = Field(16, ge=1)
    enable_prefix_caching: bool | None = None  # None: the engine's default (engines/<engine>/defaults.json)
    num_speculative_tokens: int = Field(0, ge=0, le=16)
    spec_acceptance: float = Field(0.7, ge=0.0, le=1.0)
    gpu_memory_utilization: float | None = Field(None, gt=0.0, le=1.0)  # None: the engine's default
    # TensorRT-LLM's rules that hold new prompts back (attention_dp_config; batch_wait_*), see
    # predict/serving/engine.py
    attention_dp_balance: bool | None = None
    attention_dp_timeout_iters: int | None = Field(None, ge=0)
    attention_dp_batching_wait_iters: int | None = Field(None, ge=0)
    batch_wait_timeout_iters: int | None = Field(None, ge=0)
    batch_wait_max_tokens_ratio: float | None = Field(None, ge=0.0, le=1.0)
    async_scheduling: bool | None = None  # vLLM's (None: its release's default)
    # tokens a running request's streamed chunk waits for (--stream-interval; None: 1, every token)
    stream_interval: int | None = Field(None, ge=1)


@dataclass(frozen=True)
class BenchStream:
    """What a random-dataset `servelab bench` run sends (its flags, with its names)."""

    random_input_len: int
    random_output_len: int
    random_range_ratio: float
    random_prefix_len: int
    num_prompts: int
    max_concurrency: int | None
    request_rate: float
    burstiness: float = 1.0
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    num_warmups: int = 0
    seed: int = 0
    random_range_rule: RangeRule = "vllm"  # InferenceX's client: "inferencex" (traffic.lengths)
    # the test request sent before the run (servelab bench and vLLM's bench serve send the first request's
    # prompt, as the warm-ups do): it leaves that prompt in the prefix cache
    ready_check: bool = True
    # the client's worker processes, each with its round-robin share of the requests and of the limit
    # (servelab bench's --num-workers; its result's client.num_workers); 0 or 1: one client, one queue,
    # as vLLM's bench serve and InferenceX's client send
    num_workers: int = 0

    def lengths(self) -> list[tuple[int, int]]:
        """(prompt tokens, output tokens) per request: the real run's dataset draws these first from its
        seeded generator."""
        ins, outs = sample_lengths(
            np.random.default_rng(self.seed),
            self.num_prompts,
            self.random_input_len,
            self.random_output_len,
            self.random_range_ratio,
            rule=self.random_range_rule,
        )
        return [(max(1, self.random_prefix_len + int(i)), int(o)) for i, o in zip(ins, outs, strict=True)]

    def offsets(self) -> list[float]:
        """Send offsets in seconds: the real run's open-loop schedule, or all 0 (a closed loop)."""
        offsets = arrival_offsets(
            self.num_prompts,
            self.request_rate,
            self.burstiness,
            self.seed,
            self.ramp_up_strategy,
            self.ramp_up_start_rps,
            self.ramp_up_end_rps,
        )
        return [0.0] * self.num_prompts if offsets is None else offsets


@dataclass
class TwinRun:
    """A simulated benchmark: per-request outcomes (nominal clock) and the summary a real run writes."""

    requests: list[RequestTimes]
    summary: ServingSummary
    client_latency_ms: dict[str, Distribution]
    deployment: dict
    provenance: dict
    explain: dict | None = None  # the predicted TTFT split by term (`--explain`, ttft_explain)

    def extra_fields(self) -> dict:
        """What a simulated result adds to the real run's fields."""
        extra = {"source": "simulated", "deployment": self.deployment, "prediction": self.provenance}
        return extra if self.explain is None else {**extra, "explain": self.explain}


def simulate_benchmark(
    model: ModelSpec,
    system: SystemSpec,
    parallel: Parallel,
    settings: EngineSettings,
    stream: BenchStream,
    percentile_metrics: list[str],
    percentiles: list[float],
    goodput_ms: dict[str, float],
    db: PerfDB | None = None,
    calibration: Path | None = None,
    explain: bool = False,
) -> TwinRun:
    """Replay `stream` on the deployment and summarise it as `servelab bench` summarises a measured run;
    `calibration` names the engine calibration file (None: the shipped one); `explain`: split the predicted
    TTFT by term (TwinRun.explain, ttft_explain)."""
    engine = twin_engine(settings, system, calibration)
    model = engine.model_as_served(model)
    engine = engine.running(model, system)  # the MoE terms where their fit reaches
    mem = prepare(
        model,
        system,
        parallel,
        engine.max_num_batched_tokens,
        settings.gpu_memory_utilization,
        **engine.kv_rule,
    )
    db = db or perfdb_for(system, engine.name)
    spec = SpecDecoding(draft_tokens=settings.num_speculative_tokens, acceptance=settings.spec_acceptance)
    lengths = stream.lengths()
    lanes = route(len(lengths), stream.max_concurrency, parallel)
    ranks = min(len(lanes), parallel.attn_dp)  # a client with fewer slots than ranks leaves ranks idle
    pricer = StepPricer(model, parallel, engine, db, spec_tokens=spec.draft_tokens, ranks=ranks)
    offsets = stream.offsets()
    cached = prefix_hits(stream, settings, first_prompt=lengths[0][0] if lengths else 0)
    specs = [(p, o, min(c, p - 1)) for (p, o), c in zip(lengths, cached, strict=True)]
    longest = max(p + o for p, o in lengths)
    # KV per sequence is fitted at the longest request, so the one that must fit does
    wl = Workload(isl=max(p for p, _ in lengths), osl=max(o for _, o in lengths), concurrency=1, spec=spec)
    limits = lane_limits(model, parallel, engine, mem, wl, ranks)
    check_fits(model, parallel.label(), limits, longest)
    closed = all(t == 0.0 for t in offsets)
    logs: list[StepLog] = []
    watch = watcher(logs) if explain else None
    per_clock, itl, steps = replay(
        specs, offsets, lanes, limits, engine.policy, pricer, closed, watch, stream.num_workers
    )
    prompts = [p for p, _, _ in specs]
    reqs = [times(r, 0, p) for r, p in zip(per_clock[0], prompts, strict=True)]
    summary = summary_of(reqs, itl, percentile_metrics, percentiles, goodput_ms)
    op_counts, time_shares = op_sources(pricer, model, parallel, engine, db, lengths)
    clocks = band(per_clock, closed, prompts)
    split = (
        explain_ttft(logs, per_clock[0], pricer, fitted_params(engine.name, calibration)) if explain else None
    )
    why = "" if closed else "an open loop (the measured bands are of closed loops)"
    # placed against the residuals' rows at its client's concurrency and its longest prompt and output
    asked = Asked.of(model.name, system.name, stream.max_concurrency or len(lengths), wl.isl, wl.osl)
    return TwinRun(
        requests=reqs,
        summary=summary,
        client_latency_ms=client_latency(reqs, offsets, percentiles),
        deployment={
            "model": model.name,
            "system": system.name,
            "gpus": parallel.gpus,
            "parallel": parallel.label(),
            "tp": parallel.tp,
            "ep": parallel.ep,
            "dp_attn": parallel.dp_attn,
            "pp": parallel.pp,
            "precision": model.precision.model_dump(mode="json"),
            **settings.model_dump(),
            "enable_prefix_caching": prefix_caching(settings),
            **engine_limits(engine),
        },
        provenance={
            "engine_profile": engine.source,
            "ops_by_source": op_counts,
            "kernel_time_by_source": time_shares,
            "memory": _memory_dict(mem),
            "band": clocks,
            "serving_band": serving_band(clocks, engine.name, calibration, why, asked),
            "lanes": parallel.attn_dp * parallel.pp,
            "steps": steps,
            # requests preempted in the nominal run (each recomputes later), as vLLM counts them
            # (vllm:num_preemptions_total)
            "preemptions": sum(r.preemptions for r in per_clock[0]),
            "shapes_priced": pricer.priced,
        },
        explain=split,
    )


def twin_engine(settings: EngineSettings, system: SystemSpec, calibration: Path | None) -> EngineProfile:
    """The engine profile the settings ask for on `system` (a one-line error for an engine not modelled)."""
    if settings.engine not in TWIN_ENGINES:
        raise ServelabError(
            f"unknown engine {settings.engine!r}{closest(settings.engine, list(TWIN_ENGINES))}; "
            f"expected one of {', '.join(TWIN_ENGINES)}",
            field="engine",
        )
    return engine_profile(
        settings.engine,
        system.hbm_gib,
        calibration=calibration,
        gpu_name=system.gpu_name,
        max_num_seqs=settings.max_num_seqs,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        cuda_graph_max_batch=settings.max_cudagraph_capture_size,
        chunked_prefill=settings.chunked_prefill,
        attention_dp_balance=settings.attention_dp_balance,
        attention_dp_timeout_iters=settings.attention_dp_timeout_iters,
        attention_dp_batching_wait_iters=settings.attention_dp_batching_wait_iters,
        batch_wait_timeout_iters=settings.batch_wait_timeout_iters,
        batch_wait_max_tokens_ratio=settings.batch_wait_max_tokens_ratio,
        async_scheduling=settings.async_scheduling,
        stream_interval=settings.stream_interval,
    )


def engine_limits(engine: EngineProfile) -> dict:
    """The scheduling limits in force (the settings' None replaced by the engine's defaults)."""
    return {
        "max_num_seqs": engine.max_num_seqs,
        "max_num_batched_tokens": engine.max_num_batched_tokens,
        "chunked_prefill": engine.chunked_prefill,
    }


def check_fits(model: ModelSpec, label: str, limits: LaneLimits, longest: int) -> None:
    """A one-line error when the longest request's KV cache does not fit one lane."""
    need = limits.kv_fixed + longest * limits.kv_per_token
    if need > limits.kv_capacity:
        raise ServelabError(
            f"{model.name} ({label}): a request of {longest} tokens needs {need / GIB:.2f} GiB of "
            f"KV cache per GPU, {limits.kv_capacity / GIB:.2f} GiB is free",
            field="random_input_len",
        )


def summary_of(
    reqs: list[RequestTimes],
    itl: list,
    percentile_metrics: list[str],
    percentiles: list[float],
    goodput_ms: dict[str, float],
) -> ServingSummary:
    """The summary a real run writes, of simulated requests; ITL from the pooled (seconds, weight) step gaps:
    decode stretches are runs of identical gaps, never expanded."""
    duration = max(r.start_s + r.e2el_s for r in reqs)
    summary = summarize(reqs, duration, percentile_metrics, percentiles, goodput_ms)
    if "itl" in summary.latency_ms:
        summary = replace(
            summary, latency_ms=dict(summary.latency_ms, itl=weighted_distribution_ms(itl, percentiles))
        )
    return summary


def replay(
    specs: list[tuple[int, int, int]],
    offsets: list[float],
    lanes: list[tuple[list[int], int | None]],
    limits: LaneLimits,
    policy: SchedulingPolicy,
    pricer: StepPricer,
    closed: bool,
    watch: Callable[[Lane, Replay], None] | None = None,
    workers: int = 0,
) -> tuple[dict[int, list[Request]], list, int]:
    """Every lane's share of the requests through its own scheduler. Returns the requests in index order per
    clock (a closed loop's one schedule carries all three clocks; an open loop is re-run per clock), the
    pooled ITL samples (seconds, weight) and the number of engine steps, both of the nominal run. `watch`
    is called with each nominal run's lane and source before it runs (ttft_explain.StepLog). `workers`: the
    client's worker processes (Replay), replayed where one lane takes every request; with several lanes
    each lane's share is one queue (which worker's request goes to which rank is not modelled)."""
    per_clock: dict[int, list[Request]] = {}
    itl: list = []
    steps = 0
    for drive in (0,) if closed else (0, 1, 2):
        runs: list[Request] = [None] * len(specs)  # type: ignore[list-item]  # filled lane by lane
        for indices, limit in lanes:
            lane = Lane(limits, policy, pricer.decode, pricer.mixed)
            source = Replay(
                [specs[i] for i in indices],
                [offsets[i] for i in indices],
                limit,
                drive,
                workers if len(lanes) == 1 else 1,
            )
            if watch is not None and drive == 0:
                watch(lane, source)
            run(lane, source)
            for i, req in zip(indices, source.requests, strict=True):
                runs[i] = req
            if drive == 0:
                itl.extend((d[0], w) for d, w in lane.stats.itl)
                steps += lane.stats.steps
        per_clock[drive] = runs
    return per_clock, itl, steps


def prefix_caching(settings: EngineSettings) -> bool:
    """Whether the engine reuses computed prompt blocks: the setting, else the engine's default."""
    if settings.enable_prefix_caching is not None:
        return settings.enable_prefix_caching
    return engine_defaults(Engine(settings.engine)).prefix_caching


def prefix_hits(stream: BenchStream, settings: EngineSettings, first_prompt: int) -> list[int]:
    """Prompt tokens each request finds in the prefix cache: the shared random prefix, in whole blocks, once a
    request that computed it came before (the ready check or a warm-up, or an earlier wave: requests sent
    together at t=0 all compute it, as an engine schedules them in one step). The ready check and the
    warm-ups send the first request's own prompt (bench/runner.py worker_specs; vLLM's bench serve its
    input_requests[0]), so the first request finds all of it but the last token, in whole blocks (vLLM's
    KVCacheManager.get_computed_blocks looks up at most num_tokens - 1: one token is always computed);
    `first_prompt` is that request's prompt tokens (stream.lengths()[0], drawn once by the caller)."""
    n = stream.num_prompts
    hit = (stream.random_prefix_len // settings.block_size) * settings.block_size
    if not prefix_caching(settings) or n == 0:
        return [0] * n
    if stream.num_warmups or stream.ready_check:
        first = (first_prompt - 1) // settings.block_size * settings.block_size
        return [max(hit, first)] + [hit] * (n - 1)
    if hit == 0:
        return [0] * n
    first_wave = n if stream.max_concurrency is None else min(stream.max_concurrency, n)
    if not math.isinf(stream.request_rate) or stream.ramp_up_strategy is not None:
        first_wave = 1
    return [0] * first_wave + [hit] * (n - first_wave)


def route(n: int, limit: int | None, parallel: Parallel) -> list[tuple[list[int], int | None]]:
    """Requests per scheduler lane (attention-DP rank x pipeline microbatch), round robin, and each lane's
    share of the client's concurrency limit. With fewer slots than lanes only `limit` lanes are used: the
    client never has more requests in flight."""
    lanes = parallel.attn_dp * parallel.pp
    active = max(1, min(lanes, n, limit or lanes))
    shares = split_limit(limit, active)
    return [(list(range(k, n, active)), shares[k]) for k in range(active)]


def times(req: Request, clock: int, prompt: int) -> RequestTimes:
    """One simulated request as the metrics module reads a measured one. Its content events (for the peak
    output rate) are spread evenly between its first and last token. `prompt` is the prompt as sent (a
    preempted request recomputes more)."""
    if req.first is None or req.finish is None:
        raise ServelabError(f"simulation left request {req.idx} unfinished")
    start, first, last = req.arrival[clock], req.first[clock], req.finish[clock]
    n = req.osl
    gap = (last - first) / (n - 1) if n > 1 else 0.0
    return RequestTimes(
        ok=True,
        prompt_len=prompt,
        output_len=n,
        start_s=start,
        ttft_s=first - start,
        e2el_s=last - start,
        tpot_s=gap if n > 1 else None,
        event_times_s=[first + k * gap for k in range(n)],
    )


def client_latency(
    reqs: list[RequestTimes], scheduled: list[float], percentiles: list[float]
) -> dict[str, Distribution]:
    """The real run's client-timing extras: from the scheduled time, the send lag (none: a simulated client
    is never late) and the wait for a concurrency slot."""
    pcts = sorted(set(percentiles) | {99.0})
    return {
        "ttft_from_scheduled": distribution_ms(
            [r.start_s + r.ttft_s - s for r, s in zip(reqs, scheduled, strict=True)], pcts
        ),
        "e2el_from_scheduled": distribution_ms(
            [r.start_s + r.e2el_s - s for r, s in zip(reqs, scheduled, strict=True)], pcts
        ),
        "client_send_lag": distribution_ms([0.0] * len(reqs), pcts),
        "client_queue_time": distribution_ms(
            [r.start_s - s for r, s in zip(reqs, scheduled, strict=True)], pcts
        ),
    }


def band(per_clock: dict[int, list[Request]], closed: bool, prompts: list[int]) -> dict:
    """Medians and duration per clock: step times at the step model's low and high ends (a closed loop
    prices one schedule three ways; an open loop is re-run per clock)."""
    out = {}
    for k, name in enumerate(CLOCKS):
        reqs = [times(r, k, p) for r, p in zip(per_clock[0 if closed else k], prompts, strict=True)]
        out[name] = {
            "median_ttft_ms": distribution_ms([r.ttft_s for r in reqs], []).median,
            "median_tpot_ms": distribution_ms([r.tpot_s for r in reqs if r.tpot_s is not None], []).median,
            "median_e2el_ms": distribution_ms([r.e2el_s for r in reqs], []).median,
            "duration": max(r.start_s + r.e2el_s for r in reqs),
        }
    return out


def serving_band(
    clocks: dict, backend: str, calibration: Path | None, why_no_claim: str, asked: Asked | None = None
) -> dict:
    """The claimed band (predict/bands.py) of the median TTFT and TPOT, the kernel-source band being the
    medians at the low and high clocks; the residuals are of simulated aggregated closed loops, so a
    prediction of another kind (an open loop, a disaggregated deployment: `why_no_claim`) claims none, and
    so does one outside the residuals' rows (`asked`: what the run is of)."""
    data = {
        f"{m}{end}": clocks[clock][f"median_{m}"]
        for m in ("ttft_ms", "tpot_ms")
        for end, clock in (("", "nominal"), ("_low", "low"), ("_high", "high"))
    }
    why = why_no_claim
    out = {"of": "median TTFT and TPOT", **attach_band(data, backend, calibration, asked, why)["band"]}
    return out | {"line": twin_band_line(out)}


def op_sources(
    pricer, model, parallel, engine, db, lengths, phases: tuple[str, ...] = ("decode", "prefill")
) -> tuple[dict[str, int], dict[str, float]]:
    """Where the op latencies came from (measured / interpolated / ... / roofline): ops counted over a
    typical decode step and a typical prefill step of this run, and the share of a typical request's kernel
    time (its prompt's prefill steps and its output's decode steps) by source; `phases`: the steps this
    engine runs (a disaggregated pool runs one of them)."""
    prompt = max(1, round(sum(p for p, _ in lengths) / len(lengths)))
    output = max(1.0, sum(o for _, o in lengths) / len(lengths))
    chunk = min(prompt, engine.max_num_batched_tokens)
    counts: dict[str, int] = {}
    source_us: dict[str, float] = {}
    typical = {
        "decode": (pricer.shape([], 1, prompt), output - 1),
        "prefill": (pricer.shape([(chunk, 0)], 0, 0), prompt / chunk),
    }
    for shape, steps in (typical[phase] for phase in phases):
        step = priced_step(model, parallel, shape, engine, db)
        counts = add_counts(counts, step.sources)
        source_us = add_counts(source_us, step.source_us, steps)
    return counts, shares_of(source_us)
