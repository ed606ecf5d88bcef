"""Serving metrics shared by the load generator (`servelab bench`) and the simulator (`servelab estimate
--mode agg`, `servelab plan`), with the definitions and field names of `vllm bench serve`.

Modules, one job each:
  latency      per-request TTFT, TPOT, ITL and E2EL from timestamps (each defined in its docstring), and
               RequestTimes, one request's outcome
  percentiles  the one percentile rule (linear between ranks, numpy's default) and distributions built on it
  goodput      requests meeting every SLO
  summary      ServingSummary: vLLM's aggregate result fields (throughputs, peaks, latency distributions)
  repeats      the median of repeated runs and its distribution-free confidence interval

Units are in the names: `_s` seconds, `_ms` milliseconds.
"""

from servelab.metrics.goodput import SLO_METRICS, good_requests
from servelab.metrics.latency import RequestTimes, e2el, itl, tpot, ttft
from servelab.metrics.percentiles import (
    Distribution,
    distribution_ms,
    percentile,
    percentile_word,
    weighted_distribution_ms,
)
from servelab.metrics.summary import LATENCY_METRICS, ServingSummary, summarize

__all__ = [
    "LATENCY_METRICS",
    "SLO_METRICS",
    "Distribution",
    "RequestTimes",
    "ServingSummary",
    "distribution_ms",
    "e2el",
    "itl",
    "good_requests",
    "percentile",
    "percentile_word",
    "summarize",
    "tpot",
    "ttft",
    "weighted_distribution_ms",
]
