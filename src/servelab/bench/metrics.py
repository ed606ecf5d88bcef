"""vLLM's serving metrics computed from raw records (definitions in shared/reference/serving-metrics.md).

Per request: TTFT = first content event - sent; E2EL = last content event - sent; TPOT = (E2EL - TTFT) /
(output_len - 1) when output_len > 1; ITL = every gap between consecutive content events, pooled.
Aggregates: duration from the run start until the last request ends; throughputs over that duration;
goodput = requests meeting every SLO / duration (vLLM counts TPOT as 0 for output_len <= 1);
max_output_tokens_per_s and max_concurrent_requests from 1-second buckets (vLLM counts content events
per bucket, not tokens, and so do we). Percentiles use numpy's linear interpolation, like vLLM.
servelab extras: the same latencies measured from the *scheduled* send time (coordinated omission) and the
client's own lag (sent - max(sched, slot)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class RequestMetrics:
    """Derived per-request values in seconds (vLLM's units before the *1000 for reports)."""

    ok: bool
    prompt_len: int
    output_len: int
    ttft: float = 0.0
    e2el: float = 0.0
    itl: list[float] = field(default_factory=list)
    tpot: float | None = None
    start: float = 0.0
    ttft_from_sched: float = 0.0
    e2el_from_sched: float = 0.0
    client_lag: float = 0.0
    queue_wait: float = 0.0


def derive(record: dict, output_len: int) -> RequestMetrics:
    """One record -> RequestMetrics. `output_len` is already resolved (usage, else tokenizer)."""
    prompt_len = int(record.get("in") or 0)
    if not record.get("ok"):
        return RequestMetrics(ok=False, prompt_len=prompt_len, output_len=0)
    chunks = record["chunks"]
    sent = record["sent"]
    ttft = chunks[0] / 1e6
    e2el = chunks[-1] / 1e6
    itl = [(b - a) / 1e6 for a, b in zip(chunks, chunks[1:])]
    tpot = (e2el - ttft) / (output_len - 1) if output_len > 1 else None
    sched = record.get("sched", sent)
    slot = record.get("slot", sched)
    return RequestMetrics(
        ok=True,
        prompt_len=prompt_len,
        output_len=output_len,
        ttft=ttft,
        e2el=e2el,
        itl=itl,
        tpot=tpot,
        start=sent,
        ttft_from_sched=sent + ttft - sched,
        e2el_from_sched=sent + e2el - sched,
        client_lag=sent - max(sched, slot),
        queue_wait=max(0.0, slot - sched),
    )


def stats_ms(values: list[float], percentiles: list[float]) -> dict[str, float]:
    """mean, median, std and percentiles in ms; vLLM reports 0 for an empty list (np.mean(values or 0))."""
    arr = np.asarray(values if values else [0.0], dtype=float) * 1000.0
    out = {"mean": float(np.mean(arr)), "median": float(np.median(arr)), "std": float(np.std(arr))}
    for p in percentiles:
        out[f"p{percentile_word(p)}"] = float(np.percentile(arr, p))
    return out


def percentile_word(p: float) -> str:
    """vLLM's name for a percentile: 99 -> '99', 99.9 -> '99.9'."""
    return str(int(p)) if int(p) == p else str(p)


def peak_buckets(reqs: list[RequestMetrics], chunk_times: list[list[float]]) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s (content events per 1-s bucket) and max_concurrent_requests."""
    ok = [(r, c) for r, c in zip(reqs, chunk_times) if r.ok]
    if not ok:
        return 0.0, 0
    t_min = min(r.start for r, _ in ok)
    t_max = max(r.start + r.e2el for r, _ in ok)
    n = int(math.ceil(t_max - t_min)) + 1
    tokens = np.zeros(n)
    conc = np.zeros(n)
    for r, times in ok:
        idx = (np.asarray(times) - t_min).astype(int)
        idx = idx[(idx >= 0) & (idx < n)]
        np.add.at(tokens, idx, 1)
        conc[int(r.start - t_min) : int(r.start + r.e2el - t_min) + 1] += 1
    return float(tokens.max()), int(conc.max())


def goodput_count(reqs: list[RequestMetrics], slos_ms: dict[str, float]) -> int:
    """Requests meeting every SLO (vLLM: a request with output_len <= 1 has TPOT 0)."""
    good = 0
    for r in reqs:
        if not r.ok:
            continue
        values = {"ttft": r.ttft, "tpot": r.tpot or 0.0, "e2el": r.e2el}
        if all(values[k] <= v / 1000.0 for k, v in slos_ms.items()):
            good += 1
    return good


def aggregate(
    reqs: list[RequestMetrics],
    chunk_times: list[list[float]],
    duration: float,
    percentile_metrics: list[str],
    percentiles: list[float],
    goodput_slos: dict[str, float],
) -> dict:
    """vLLM's result fields (only the selected metrics get mean/median/std/percentiles, like vLLM)."""
    ok = [r for r in reqs if r.ok]
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(r.output_len for r in ok)
    dur = duration if duration > 0 else float("nan")
    peak_tok, peak_conc = peak_buckets(reqs, chunk_times)
    out: dict = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(reqs) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / dur,
        "request_goodput": goodput_count(reqs, goodput_slos) / dur if goodput_slos else None,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
        "max_output_tokens_per_s": peak_tok,
        "max_concurrent_requests": peak_conc,
    }
    series = {
        "ttft": [r.ttft for r in ok],
        "tpot": [r.tpot for r in ok if r.tpot is not None],
        "itl": [x for r in ok for x in r.itl],
        "e2el": [r.e2el for r in ok],
    }
    for name in ("ttft", "tpot", "itl", "e2el"):
        if name not in percentile_metrics:
            continue
        for key, value in stats_ms(series[name], percentiles).items():
            out[f"{key}_{name}_ms"] = value
    return out


def client_stats(reqs: list[RequestMetrics], percentiles: list[float]) -> dict:
    """servelab extras: latency from the scheduled time, the client's own lag, client-side queueing."""
    ok = [r for r in reqs if r.ok]
    out: dict = {}
    for name, values in (
        ("ttft_from_scheduled", [r.ttft_from_sched for r in ok]),
        ("e2el_from_scheduled", [r.e2el_from_sched for r in ok]),
        ("client_send_lag", [r.client_lag for r in ok]),
        ("client_queue_time", [r.queue_wait for r in ok]),
    ):
        pcts = sorted(set(percentiles) | {99.0})
        s = stats_ms(values, pcts)
        s["max"] = float(max(values) * 1000.0) if values else 0.0
        for key, value in s.items():
            out[f"{key}_{name}_ms"] = value
    return out
