"""Goodput, as `vllm bench serve --goodput` counts it: requests that meet every service-level objective."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from servelab.metrics.latency import RequestTimes

SLO_METRICS = ("ttft", "tpot", "e2el")  # the metrics an SLO may bound (vLLM's VALID_NAMES)


def good_requests(requests: Iterable[RequestTimes], slos_ms: Mapping[str, float]) -> int:
    """Successful requests whose every bounded metric is at most its SLO (ms). vLLM counts the TPOT of a
    request with one output token (no TPOT) as 0, so such a request meets any TPOT objective."""
    good = 0
    for r in requests:
        if not r.ok:
            continue
        values_s = {"ttft": r.ttft_s, "tpot": r.tpot_s or 0.0, "e2el": r.e2el_s}
        if all(values_s[k] <= limit_ms / 1000.0 for k, limit_ms in slos_ms.items()):
            good += 1
    return good
