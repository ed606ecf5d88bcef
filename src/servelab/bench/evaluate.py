"""Merged records -> BenchResult: per-request metrics (measured.py), the run summary (servelab.metrics), the
client's own health (its CPU, event-loop lag and send lag, to warn when the client may have shaped latency),
and where the token counts came from."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable

import numpy as np

from servelab.bench import result as R
from servelab.bench.config import BenchConfig
from servelab.bench.datasets import Dataset
from servelab.bench.tally import Tally
from servelab.bench.tokenizer import LocalTokenizer
from servelab.hostinfo import cpu_model
from servelab.metrics import percentile
from servelab.metrics.streaming import sorted_percentile

# Thresholds for the client-bottleneck warning (why: above these the client, not the server, shapes latency).
CPU_BUSY_PCT = 90.0  # a worker busy >= 90 % of a core has no headroom left for timely reads
LOOP_LAG_P99_MS = 5.0  # timers / reads late by more than this inflate TTFT and ITL by as much
SEND_LAG_P99_MS = 5.0  # requests leaving later than scheduled (after the first cohort) by more than this
LOOP_LAG_NOTE = "sampled every 10 ms; asyncio/uvloop timers round up to 1 ms, so ~0.5-1 ms is the floor"


def compute_result(
    cfg: BenchConfig,
    records: Iterable[dict],
    summaries: list[dict],
    infos: list[dict],
    data: Dataset,
    tok: LocalTokenizer | None,
    model_id: str,
    date: str,
    details: bool = False,
) -> R.BenchResult:
    """The result of one point from its records (in merged order: by send time, the never-sent last; read
    once, or twice with --cool-down, never held) and the workers' own summaries and ready infos. The
    per-request detail lists are kept only with --save-detailed or `details` (they grow with the run)."""
    until = None
    if cfg.cool_down_s:
        end = max((r["end"] for r in records if r.get("sent") is not None), default=0.0)
        until = max(0.0, end - cfg.cool_down_s)
    tally = Tally(cfg, tok, until, details or cfg.save_detailed)
    for r in records:
        tally.add(r)
    duration = tally.last_end if until is None else until  # from T0 (the first dispatch) to the last end
    cool_down = None
    if until is not None:
        cool_down = {"seconds": cfg.cool_down_s, "excluded_requests": tally.cooled, "measured_until_s": until}
    client = client_report(summaries, infos)
    one_read_msg = one_read_warning(tally.one_read, tally.streamed_multi, cfg)
    return R.BenchResult(
        header=R.header_fields(cfg, model_id, date),
        summary=tally.summary.summary(duration),
        client_latency_ms=tally.client.distributions_ms(cfg.metric_percentiles),
        not_sent=tally.not_sent,
        failure_reasons=dict(tally.reasons.most_common()),
        token_count_source=_token_count_source(tally.sources),
        prompt_len_source=_prompt_len_source(tally.in_sources, data),
        client=client,
        client_bottleneck_warning=bottleneck_warning(client, tally.client.send_lags_s(), cfg),
        one_read_requests=tally.one_read if one_read_msg else 0,
        one_read_warning=one_read_msg,
        provenance=R.provenance(),
        config=cfg.public_dump(),
        details=tally.details.result() if tally.details is not None else None,
        cool_down=cool_down,
    )


def _token_count_source(sources: Counter[str]) -> str:
    if not sources:
        return "none"
    if len(sources) == 1:
        return next(iter(sources))
    return "mixed: " + ", ".join(f"{k} x{v}" for k, v in sources.items())


def _prompt_len_source(in_src: Counter, data: Dataset) -> str:
    if in_src and set(in_src) == {"usage"}:
        return "server usage.prompt_tokens"
    if not in_src.get("usage"):
        return f"dataset ({data.prompt_len_source})"
    return f"mixed: usage x{in_src['usage']}, dataset ({data.prompt_len_source}) x{in_src.get('dataset', 0)}"


def client_report(summaries: list[dict], infos: list[dict]) -> R.ClientReport:
    """The client section from the workers' summaries (CPU, loop lag samples, connections) and ready infos."""
    lags = sorted(x for s in summaries for x in s["loop_lag_s"])
    cpu = sum(s["cpu_s"] for s in summaries)
    events = sum(s["content_events"] for s in summaries)
    return R.ClientReport(
        num_workers=len(summaries),
        event_loop=",".join(sorted({s["loop"] for s in summaries})) or "-",
        cpu_seconds=cpu,
        cpu_util_per_worker_pct=[100.0 * s["cpu_s"] / max(s["wall_s"], 1e-9) for s in summaries],
        cpu_us_per_content_event=1e6 * cpu / events if events else 0.0,
        event_loop_lag_mean_ms=1000 * sum(lags) / len(lags) if lags else 0.0,
        event_loop_lag_p99_ms=percentile(lags, 99) * 1000 if lags else 0.0,
        event_loop_lag_max_ms=lags[-1] * 1000 if lags else 0.0,
        event_loop_lag_note=LOOP_LAG_NOTE,
        connections_opened=sum(s["connections_opened"] for s in summaries),
        warmup_failed=sum(i.get("warmup_failed", 0) for i in infos),
        abort_reasons=[s["abort_reason"] for s in summaries if s.get("abort_reason")],
        host_cpu=cpu_model(),
        host_cores=os.cpu_count() or 0,
    )


def bottleneck_warning(client: R.ClientReport, send_lags_s: np.ndarray, cfg: BenchConfig) -> str | None:
    """Why the client may have been the bottleneck, or None. `send_lags_s`: the client's own lag of each
    successful request, in order of their start."""
    why = []
    busy = [u for u in client.cpu_util_per_worker_pct if u >= CPU_BUSY_PCT]
    if busy:
        why.append(f"{len(busy)} worker(s) used >= {CPU_BUSY_PCT:.0f}% of a core (max {max(busy):.0f}%)")
    if client.event_loop_lag_p99_ms > LOOP_LAG_P99_MS:
        why.append(f"event-loop lag p99 {client.event_loop_lag_p99_ms:.1f} ms > {LOOP_LAG_P99_MS} ms")
    # send lag after the first cohort: the opening burst of a closed loop is expected to queue briefly
    first = cfg.max_concurrency or 0
    lags = np.sort(send_lags_s[first:])
    if len(lags):
        p99 = sorted_percentile(lags, 99) * 1000
        if p99 > SEND_LAG_P99_MS:
            why.append(
                f"send lag p99 {p99:.1f} ms > {SEND_LAG_P99_MS} ms (requests left later than scheduled)"
            )
    return "; ".join(why) or None


def one_read_warning(one_read: int, streamed: int, cfg: BenchConfig) -> str | None:
    """Streamed requests whose every token came in one socket read (`one_read` of the `streamed` successful
    ones with more than one token), so their TPOT and ITL read 0. Seen against vLLM on a 2-core machine whose
    API process was starved by the engine: it sent the whole answer at the end."""
    if not cfg.stream or not one_read:
        return None
    return (
        f"{one_read} of {streamed} streamed requests received all their tokens in one socket read "
        "(the server sent them as one burst, or this client read late: see the client fields); "
        "their TPOT and ITL read 0"
    )
