"""The automatic rate sweep (`--request-rate sweep`), after GuideLLM's sweep profile
(vllm-project/guidellm, benchmark/profiles): measure the synchronous rate (one request at a time) and the
saturation throughput (every request at once, within --max-concurrency), then run `num_rates` open-loop
rates evenly spaced strictly between the two.

A generator that is sent each step's result and answers with the next step, so the runner stays a plain loop
and the plan can depend on what was measured."""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass

from servelab.bench.result import BenchResult
from servelab.readable import number, typed


@dataclass(frozen=True)
class SweepStep:
    """One benchmark point of the sweep: a name for tables and file names, its concurrency and rate."""

    name: str
    max_concurrency: int | None
    request_rate: float


def between(low: float, high: float, num: int) -> list[float]:
    """`num` rates evenly spaced strictly between low and high."""
    gap = (high - low) / (num + 1)
    return [low + gap * (k + 1) for k in range(num)]


def rate_sweep(num_rates: int, max_concurrency: int | None) -> Generator[SweepStep, BenchResult, str | None]:
    """Yield the steps; send each step's result. Returns why it stopped early (None when all ran)."""
    sync = yield SweepStep("synchronous", 1, math.inf)
    peak = yield SweepStep("throughput", max_concurrency, math.inf)
    low, high = sync.summary.request_throughput, peak.summary.request_throughput
    if not 0 < low < high:
        return f"no rates to sweep: synchronous {number(low, 3)} req/s, saturation {number(high, 3)} req/s"
    for rate in between(low, high, num_rates):
        yield SweepStep(f"rate {typed(rate)}", max_concurrency, rate)
    return None
