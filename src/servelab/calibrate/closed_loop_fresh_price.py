"""A fresh closed-loop replay (calibrate.closed_loop_fresh) priced as servelab prices it for a user:
aggregated points by the aggregated twin (`servelab estimate --mode agg --num-prompts`, with the engine
flags the run set), disaggregated points by one given split (`servelab estimate --mode disagg`). Each answer
carries the figure compared with the measurement, its p99, and the band the estimate states for it.

Pricing reads no measurement: it is given the replay alone.
"""

import math
from pathlib import Path

from servelab.calibrate.closed_loop_fresh import FreshReplay
from servelab.errors import ServelabError
from servelab.predict.band_domain import Asked
from servelab.predict.bands import attach_band
from servelab.predict.engines import EngineProfile, engine_profile
from servelab.predict.plan.search import point_sources
from servelab.predict.plan.split import price_given_split, split_context
from servelab.predict.serving import Workload, estimate_aggregated
from servelab.specs import SystemSpec, check_precision, load_system

# the estimate's percentile key for each statistic a replay is compared at
STAT_KEY = {"median": "p50", "mean": "mean"}


def engine_for(replay: FreshReplay, system: SystemSpec, calibration: Path | None) -> EngineProfile:
    """The engine profile under the calibration, on the run's GPU and engine release, with the flags the
    run's launch scripts set."""
    gpu, version = system.gpu_name, replay.version or None
    base = engine_profile(
        replay.engine.value, system.hbm_gib, calibration=calibration, gpu_name=gpu, engine_version=version
    )
    overrides = replay.settings.engine_overrides(base.max_num_batched_tokens)
    return engine_profile(
        replay.engine.value,
        system.hbm_gib,
        calibration=calibration,
        gpu_name=gpu,
        engine_version=version,
        **overrides,
    )


def band(data: dict, metric: str, stat: str) -> tuple[float, float] | None:
    """The (low, high) band an estimate states for `metric` at `stat`: its claimed serving band
    (predict.bands: log-residual quantiles, placed around the figure at that statistic) where it has one,
    else its percentile kernel-source band, else the band of its headline figure; None where it states
    none."""
    key = STAT_KEY[stat]
    claimed = (data.get("band") or {}).get(metric) or {}
    quantiles = claimed.get("log_residual_quantiles")
    value = data.get("percentiles", {}).get(metric, {}).get(key)
    if quantiles is not None and value is not None:
        return value * math.exp(quantiles[0]), value * math.exp(quantiles[1])
    lows, highs = (
        data.get("percentiles_low", {}).get(metric, {}),
        data.get("percentiles_high", {}).get(metric, {}),
    )
    if key in lows and key in highs:
        pair = (lows[key], highs[key])
    elif f"{metric}_low" in data and f"{metric}_high" in data:
        pair = (data[f"{metric}_low"], data[f"{metric}_high"])
    else:
        return None
    return min(pair), max(pair)


def price_agg(replay: FreshReplay, calibration: Path | None) -> dict:
    """The aggregated twin's answer (its JSON fields) for the replay: 10 x C requests from an idle engine."""
    if replay.parallel is None:
        raise ServelabError(f"{replay.row_id}: an aggregated replay without its layout", field="tp")
    system = load_system(replay.system)
    engine = engine_for(replay, system, calibration)
    check_precision(engine.model_as_served(replay.model), system)
    workload = Workload(
        isl=replay.isl,
        osl=replay.osl,
        concurrency=replay.concurrency,
        warmup=0,
        num_requests=replay.num_prompts,
        range_ratio=replay.spread,
    )
    est = estimate_aggregated(
        replay.model,
        system,
        replay.parallel,
        engine,
        replay.concurrency,
        replay.isl,
        replay.osl,
        workload=workload,
        gpu_memory_utilization=replay.settings.memory_share,
    )
    # the band `servelab estimate --mode agg` states: the claimed serving band (predict.bands)
    asked = Asked.of(replay.model.name, replay.system, replay.concurrency, replay.isl, replay.osl)
    data = est.model_dump(mode="json", exclude_none=True)
    return attach_band(data, replay.engine.value, calibration, asked)


def price_disagg(replay: FreshReplay, calibration: Path | None) -> dict:
    """The disaggregated estimate's figures for the replay's split at its concurrency, with their bands (the
    fields `servelab estimate --mode disagg --json` writes: cli/estimate_disagg.answer)."""
    if replay.split is None:
        raise ServelabError(f"{replay.row_id}: a disaggregated replay without its pools", field="prefill_tp")
    system = load_system(replay.system)
    engine = engine_for(replay, system, calibration)
    model = engine.model_as_served(replay.model)
    check_precision(model, system)
    ctx = split_context(model, system, engine, replay.split, replay.isl, replay.osl)
    got = price_given_split(ctx, replay.split, replay.concurrency)
    p = got.point
    return {
        "ttft_ms": p.ttft[0],
        "ttft_ms_low": min(p.ttft[1], p.ttft[2]),
        "ttft_ms_high": max(p.ttft[1], p.ttft[2]),
        "tpot_ms": p.tpot[0],
        "tpot_ms_low": min(p.tpot[1], p.tpot[2]),
        "tpot_ms_high": max(p.tpot[1], p.tpot[2]),
        "bound": got.bound,
        "request_rate": got.request_rate,
        "ttft_parts_ms": {
            "prefill_queue_and_prefill": got.prefill_ms,
            "kv_transfer": got.transfer_ms,
            "decode_first_step": got.first_step_ms,
        },
        "kernel_time_by_source": point_sources(ctx, p),
    }


def price(replay: FreshReplay, calibration: Path | None = None) -> dict:
    """What the replay's estimate says, at the statistic its measurement is compared with: `ttft_ms` and
    `tpot_ms`, their bands (`*_band`: low, high, or None), the p99s where the estimate has them, and the
    estimate's whole answer (`estimate`)."""
    stat = replay.statistic
    if replay.mode == "agg":
        data = price_agg(replay, calibration)
        pct = data["percentiles"]
        key = STAT_KEY[stat]
        ttft, tpot = pct["ttft_ms"][key], pct["tpot_ms"][key]
        p99 = (pct["ttft_ms"].get("p99"), pct["tpot_ms"].get("p99"))
    else:
        data = price_disagg(replay, calibration)
        ttft, tpot = data["ttft_ms"], data["tpot_ms"]
        p99 = (None, None)
    return {
        "statistic": stat,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "ttft_p99_ms": p99[0],
        "tpot_p99_ms": p99[1],
        "ttft_band": band(data, "ttft_ms", stat),
        "tpot_band": band(data, "tpot_ms", stat),
        "kernel_time_by_source": data.get("kernel_time_by_source")
        or data.get("provenance", {}).get("kernel_time_by_source"),
        "estimate": {k: v for k, v in data.items() if k not in ("provenance", "breakdown")},
    }
