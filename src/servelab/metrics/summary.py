"""ServingSummary: the aggregate fields of a `vllm bench serve` result, computed from per-request outcomes.

Duration runs from the run start until the last request ends; throughputs are over that duration (vLLM writes
NaN for a zero duration, and so do we). `max_output_tokens_per_s` and `max_concurrent_requests` come from
1-second buckets from the first request's start; like vLLM, a bucket counts content events, not tokens.
Only the selected latency metrics (`--percentile-metrics`) get their mean, median, std and percentiles; a TPOT
statistic of 0 is left out (see `ServingSummary.fields`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from servelab.metrics.goodput import good_requests
from servelab.metrics.latency import RequestTimes
from servelab.metrics.percentiles import Distribution, distribution_ms

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")  # vLLM's --percentile-metrics names, in report order


@dataclass(frozen=True)
class ServingSummary:
    """vLLM's aggregate result fields; `fields()` gives them under vLLM's names, in vLLM's order."""

    duration: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    request_goodput: float | None  # None without SLOs, as vLLM writes it
    output_throughput: float
    total_token_throughput: float
    max_output_tokens_per_s: float
    max_concurrent_requests: int
    latency_ms: dict[str, Distribution]  # selected metric name ('ttft', ...) -> its distribution in ms

    def fields(self) -> dict[str, float | int | None]:
        """Flat result fields: the counts and throughputs, then `mean_ttft_ms`, `median_ttft_ms`,
        `std_ttft_ms`, `p99_ttft_ms`, ... for each selected metric."""
        out: dict[str, float | int | None] = {
            "duration": self.duration,
            "completed": self.completed,
            "failed": self.failed,
            "total_input_tokens": self.total_input_tokens,
            "total_output_tokens": self.total_output_tokens,
            "request_throughput": self.request_throughput,
            "request_goodput": self.request_goodput,
            "output_throughput": self.output_throughput,
            "total_token_throughput": self.total_token_throughput,
            "max_output_tokens_per_s": self.max_output_tokens_per_s,
            "max_concurrent_requests": self.max_concurrent_requests,
        }
        for name, d in self.latency_ms.items():
            fields = distribution_fields(name, d)
            if name == "tpot":
                # InferenceX's utils/process_result.py divides 1000 by every TPOT field (its interactivity),
                # so a TPOT statistic of 0 is left out rather than written: vLLM writes 0 when no request had
                # more than one output token, and one TPOT's std, or tokens all arriving in one read, are 0
                fields = {k: v for k, v in fields.items() if v != 0}
            out.update(fields)
        return out


def distribution_fields(name: str, d: Distribution, with_max: bool = False) -> dict[str, float]:
    """vLLM's field names for one metric's distribution: mean_<name>_ms, median_..., std_..., p<N>_..."""
    out = {f"mean_{name}_ms": d.mean, f"median_{name}_ms": d.median, f"std_{name}_ms": d.std}
    out.update({f"p{word}_{name}_ms": v for word, v in d.percentiles.items()})
    if with_max:
        out[f"max_{name}_ms"] = d.max
    return out


def summarize(
    requests: Sequence[RequestTimes],
    duration_s: float,
    percentile_metrics: Iterable[str],
    percentiles: Sequence[float],
    goodput_slos_ms: Mapping[str, float],
) -> ServingSummary:
    """The summary of one run (`duration_s` from the run start to the last request's end)."""
    ok = [r for r in requests if r.ok]
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(r.output_len for r in ok)
    dur = duration_s if duration_s > 0 else float("nan")
    peak_events, peak_concurrency = peak_buckets(ok)
    series = {
        "ttft": [r.ttft_s for r in ok],
        "tpot": [r.tpot_s for r in ok if r.tpot_s is not None],
        "itl": [x for r in ok for x in r.itl_s],
        "e2el": [r.e2el_s for r in ok],
    }
    selected = set(percentile_metrics)
    return ServingSummary(
        duration=duration_s,
        completed=len(ok),
        failed=len(requests) - len(ok),
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=len(ok) / dur,
        request_goodput=good_requests(requests, goodput_slos_ms) / dur if goodput_slos_ms else None,
        output_throughput=total_out / dur,
        total_token_throughput=(total_in + total_out) / dur,
        max_output_tokens_per_s=peak_events,
        max_concurrent_requests=peak_concurrency,
        latency_ms={
            name: distribution_ms(series[name], percentiles) for name in LATENCY_METRICS if name in selected
        },
    )


def peak_buckets(ok: Sequence[RequestTimes]) -> tuple[float, int]:
    """The most content events and the most requests in flight in any 1-second bucket of successful
    requests."""
    if not ok:
        return 0.0, 0
    t_min = min(r.start_s for r in ok)
    t_max = max(r.start_s + r.e2el_s for r in ok)
    n = int(math.ceil(t_max - t_min)) + 1
    events = [0] * n
    in_flight = [0] * n
    for r in ok:
        for t in r.event_times_s:
            k = int(t - t_min)
            if 0 <= k < n:
                events[k] += 1
        for k in range(int(r.start_s - t_min), min(n, int(r.start_s + r.e2el_s - t_min) + 1)):
            in_flight[k] += 1
    return float(max(events)), max(in_flight)
