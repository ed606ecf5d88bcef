"""Per-request latencies from raw timestamps, as `vllm bench serve` defines them (vllm/benchmarks/serve.py,
calculate_metrics). All times are on one clock and in one unit, and the results are in that unit (callers name
it: `ttft_s`, `itl_us`); `start` is when the request was sent (measured) or arrived at the engine
(simulated)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise


def ttft(start: float, first_token: float) -> float:
    """Time to first token: from the start to the first content event (first token out of the engine)."""
    return first_token - start


def e2el(start: float, last_token: float) -> float:
    """End-to-end latency: from the start to the last content event (the request's last token)."""
    return last_token - start


def tpot(first_token: float, last_token: float, output_len: int) -> float | None:
    """Time per output token, first token excluded: (last token - first token) / (output_len - 1), which is
    (E2EL - TTFT) / (output_len - 1); None for output_len <= 1.

    Divides by tokens, not content events: a chunk carrying several tokens (speculative decoding, a late read)
    counts each of them."""
    return (last_token - first_token) / (output_len - 1) if output_len > 1 else None


def itl(event_times: Sequence[float]) -> list[float]:
    """Inter-token latencies: every gap between consecutive content events (first token excluded). A run's ITL
    distribution pools the gaps of all its requests."""
    return [b - a for a, b in pairwise(event_times)]


@dataclass
class RequestTimes:
    """One request's outcome, in seconds: what the summary and goodput read. A failed request (`ok` False)
    counts only as a failure."""

    ok: bool
    prompt_len: int
    output_len: int
    start_s: float = 0.0  # on the run's clock
    ttft_s: float = 0.0
    e2el_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    tpot_s: float | None = None
    event_times_s: list[float] = field(default_factory=list)  # each content event on the run's clock
