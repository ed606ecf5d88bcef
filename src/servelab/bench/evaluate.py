"""Merged records -> BenchResult: per-request metrics (measured.py), the run summary (servelab.metrics), the
client's own health (its CPU, event-loop lag and send lag, to warn when the client may have shaped latency),
and where the token counts came from."""

from __future__ import annotations

import re
from collections import Counter

from servelab.bench import result as R
from servelab.bench.config import BenchConfig
from servelab.bench.datasets import Dataset
from servelab.bench.measured import MeasuredRequest, client_latency_ms, derive
from servelab.bench.tokenizer import LocalTokenizer
from servelab.metrics import percentile, summarize

# Thresholds for the client-bottleneck warning (why: above these the client, not the server, shapes latency).
CPU_BUSY_PCT = 90.0  # a worker busy >= 90 % of a core has no headroom left for timely reads
LOOP_LAG_P99_MS = 5.0  # timers / reads late by more than this inflate TTFT and ITL by as much
SEND_LAG_P99_MS = 5.0  # requests leaving later than scheduled (after the first cohort) by more than this
LOOP_LAG_NOTE = "sampled every 10 ms; asyncio/uvloop timers round up to 1 ms, so ~0.5-1 ms is the floor"


def resolve_output_len(rec: dict, tok: LocalTokenizer | None) -> tuple[int, str]:
    """A successful request's output tokens and where the count came from."""
    if rec.get("out") is not None:
        return int(rec["out"]), "usage"
    if tok is not None:
        return tok.count(rec.get("text") or ""), "tokenizer"
    return len(rec.get("chunks") or []), "content events (approximate: no usage, no tokenizer)"


def compute_result(
    cfg: BenchConfig,
    records: list[dict],
    summaries: list[dict],
    infos: list[dict],
    data: Dataset,
    tok: LocalTokenizer | None,
    model_id: str,
    date: str,
) -> R.BenchResult:
    """The result of one point from its records and the workers' own summaries and ready infos."""
    sent = [r for r in records if r.get("sent") is not None]
    not_sent = len(records) - len(sent)
    duration = max((r["end"] for r in sent), default=0.0)  # from T0 (the first dispatch) to the last end
    cool_down = None
    if cfg.cool_down_s:
        sent, duration, cool_down = _cooled(sent, duration, cfg.cool_down_s)
    reqs: list[MeasuredRequest] = []
    sources: Counter[str] = Counter()
    out_lens = []
    for r in sent:
        n = 0
        if r["ok"]:
            n, src = resolve_output_len(r, tok)
            sources[src] += 1
        out_lens.append(n)
        reqs.append(derive(r, n))
    client = client_report(summaries, infos)
    one_read, one_read_msg = one_read_warning(reqs, cfg)
    return R.BenchResult(
        header=R.header_fields(cfg, model_id, date),
        summary=summarize(reqs, duration, cfg.percentile_metrics, cfg.metric_percentiles, cfg.goodput),
        client_latency_ms=client_latency_ms(reqs, cfg.metric_percentiles),
        not_sent=not_sent,
        failure_reasons=dict(Counter(_reason_key(r["err"]) for r in records if not r["ok"]).most_common()),
        token_count_source=_token_count_source(sources),
        prompt_len_source=_prompt_len_source(sent, data),
        client=client,
        client_bottleneck_warning=bottleneck_warning(client, reqs, cfg),
        one_read_requests=one_read,
        one_read_warning=one_read_msg,
        provenance=R.provenance(),
        config=cfg.public_dump(),
        details=_details(sent, reqs, out_lens),
        cool_down=cool_down,
    )


def _cooled(sent: list[dict], end: float, seconds: float) -> tuple[list[dict], float, dict]:
    """--cool-down: the requests measured (every failure, and the successes that ended before the last
    `seconds` of the run), where the measured span ends, and what the result says of it. As the run drains,
    fewer requests share the server: their latencies and the throughput of that tail describe a lighter
    load than the one asked for (GuideLLM's cool-down). Failures always count."""
    until = max(0.0, end - seconds)
    kept = [r for r in sent if not r["ok"] or r["end"] <= until]
    info = {"seconds": seconds, "excluded_requests": len(sent) - len(kept), "measured_until_s": until}
    return kept, until, info


def _details(sent: list[dict], reqs: list[MeasuredRequest], out_lens: list[int]) -> R.RequestDetails:
    """The detail lists in request order, like vLLM."""
    order = sorted(range(len(sent)), key=lambda i: sent[i]["i"])
    return R.RequestDetails(
        input_lens=[reqs[i].prompt_len for i in order],
        output_lens=[out_lens[i] for i in order],
        ttfts=[reqs[i].ttft_s for i in order],
        itls=[reqs[i].itl_s for i in order],
        latencies=[reqs[i].e2el_s for i in order],
        start_times=[reqs[i].start_s for i in order],
        generated_texts=[sent[i].get("text", "") for i in order],
        errors=[sent[i]["err"] or "" for i in order],
    )


def _token_count_source(sources: Counter[str]) -> str:
    if not sources:
        return "none"
    if len(sources) == 1:
        return next(iter(sources))
    return "mixed: " + ", ".join(f"{k} x{v}" for k, v in sources.items())


def _prompt_len_source(sent: list[dict], data: Dataset) -> str:
    in_src = Counter(r.get("in_src") for r in sent if r["ok"])
    if in_src and set(in_src) == {"usage"}:
        return "server usage.prompt_tokens"
    if not in_src.get("usage"):
        return f"dataset ({data.prompt_len_source})"
    return f"mixed: usage x{in_src['usage']}, dataset ({data.prompt_len_source}) x{in_src.get('dataset', 0)}"


def _reason_key(err: str | None) -> str:
    """Group failure reasons: drop the per-request numbers so identical causes count together."""
    return re.sub(
        r"after \d+ content events|\(\d+ content events\)", "after N content events", err or "unknown"
    )


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
    )


def bottleneck_warning(client: R.ClientReport, reqs: list[MeasuredRequest], cfg: BenchConfig) -> str | None:
    """Why the client may have been the bottleneck, or None."""
    why = []
    busy = [u for u in client.cpu_util_per_worker_pct if u >= CPU_BUSY_PCT]
    if busy:
        why.append(f"{len(busy)} worker(s) used >= {CPU_BUSY_PCT:.0f}% of a core (max {max(busy):.0f}%)")
    if client.event_loop_lag_p99_ms > LOOP_LAG_P99_MS:
        why.append(f"event-loop lag p99 {client.event_loop_lag_p99_ms:.1f} ms > {LOOP_LAG_P99_MS} ms")
    # send lag after the first cohort: the opening burst of a closed loop is expected to queue briefly
    first = cfg.max_concurrency or 0
    by_start = sorted((r for r in reqs if r.ok), key=lambda r: r.start_s)
    lags = sorted(r.client_lag_s for r in by_start[first:])
    if lags:
        p99 = percentile(lags, 99) * 1000
        if p99 > SEND_LAG_P99_MS:
            why.append(
                f"send lag p99 {p99:.1f} ms > {SEND_LAG_P99_MS} ms (requests left later than scheduled)"
            )
    return "; ".join(why) or None


def one_read_warning(reqs: list[MeasuredRequest], cfg: BenchConfig) -> tuple[int, str | None]:
    """Streamed requests whose every token came in one socket read, so their TPOT and ITL read 0. Seen
    against vLLM on a 2-core machine whose API process was starved by the engine: it sent the whole answer at
    the end."""
    if not cfg.stream:
        return 0, None
    streamed = [r for r in reqs if r.ok and r.output_len > 1]
    one_read = sum(1 for r in streamed if not any(r.itl_s))
    if not one_read:
        return 0, None
    return one_read, (
        f"{one_read} of {len(streamed)} streamed requests received all their tokens in one socket read "
        "(the server sent them as one burst, or this client read late: see the client fields); "
        "their TPOT and ITL read 0"
    )
