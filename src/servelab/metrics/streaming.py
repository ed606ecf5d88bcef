"""The run summary built one request at a time, for runs too long to hold their requests (`servelab bench`
reads its records from disk): the fields and rules of `summarize`, with what they need kept compact.

- A per-request series (TTFT, TPOT, E2EL, the client's extras) is a float64 array: 8 bytes a request.
- Inter-token gaps, one per token, are kept as counts of their distinct values (the gaps are whole
  microseconds, so a run holds a few thousand distinct ones whatever its number of tokens).
- The 1-second buckets of `peak_buckets` are filled as requests come, which needs them in order of their
  start (the merged records are in that order); a request out of order is refused.

Against `summarize` on the same requests (tests/metrics/test_streaming.py): counts, totals, throughputs,
goodput, peaks, maxima and every percentile are equal; means and standard deviations agree to within a few
units in the last place (numpy adds in another order than Python's `sum`, itself compensated from
Python 3.12).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from servelab.metrics.goodput import good_requests
from servelab.metrics.latency import RequestTimes
from servelab.metrics.percentiles import Distribution, distribution_ms, percentile, percentile_word
from servelab.metrics.summary import LATENCY_METRICS, ServingSummary

FOLD = 1 << 16  # values buffered before a fold (512 KB; the fold's temporaries are a few times that)


class _Ranks(Sequence[float]):
    """Sorted values read by rank as Python floats, so `percentile` reads them as the sorted list they stand
    for: an ascending array, or distinct values ascending with how often each occurs."""

    def __init__(self, values: np.ndarray, counts: np.ndarray | None = None) -> None:
        self.values = values
        self.ends = np.cumsum(counts) if counts is not None else None  # the rank after each value's last

    def __len__(self) -> int:
        if self.ends is None:
            return len(self.values)
        return int(self.ends[-1]) if len(self.ends) else 0

    def __getitem__(self, rank):  # type: ignore[override]  # ranks only, never slices
        if self.ends is None:
            return float(self.values[rank])
        return float(self.values[int(np.searchsorted(self.ends, rank, side="right"))])


def sorted_percentile(ordered: np.ndarray, p: float) -> float:
    """`percentile` of an ascending array."""
    return percentile(_Ranks(ordered), p)


def distribution_of_counts_ms(
    values_s: np.ndarray, counts: np.ndarray, percentiles: Iterable[float]
) -> Distribution:
    """`distribution_ms` of a list given as distinct values (seconds, ascending) and how often each occurs."""
    pcts = list(percentiles)
    n = int(counts.sum()) if len(counts) else 0
    if n == 0:
        return distribution_ms([], pcts)
    ms = values_s * 1000.0
    ranks = _Ranks(ms, counts)
    mean = float(np.dot(ms, counts) / n)
    return Distribution(
        mean=mean,
        median=percentile(ranks, 50),
        std=math.sqrt(float(np.dot((ms - mean) ** 2, counts)) / n),
        max=float(ms[-1]),
        percentiles={percentile_word(p): percentile(ranks, p) for p in pcts},
    )


def distribution_of_array_ms(values_s: np.ndarray, percentiles: Iterable[float]) -> Distribution:
    """`distribution_ms` of a float64 array of values in seconds."""
    pcts = list(percentiles)
    if len(values_s) == 0:
        return distribution_ms([], pcts)
    ordered = np.sort(values_s * 1000.0)
    ranks = _Ranks(ordered)
    mean = float(ordered.mean())
    return Distribution(
        mean=mean,
        median=percentile(ranks, 50),
        std=float(np.sqrt(((ordered - mean) ** 2).mean())),
        max=float(ordered[-1]),
        percentiles={percentile_word(p): percentile(ranks, p) for p in pcts},
    )


class Series:
    """One value per request, appended as requests come (8 bytes each)."""

    def __init__(self) -> None:
        self.values = array("d")

    def add(self, value: float) -> None:
        self.values.append(value)

    def __len__(self) -> int:
        return len(self.values)

    def array(self) -> np.ndarray:
        return np.frombuffer(self.values, dtype=np.float64) if self.values else np.empty(0)

    def distribution_ms(self, percentiles: Iterable[float]) -> Distribution:
        return distribution_of_array_ms(self.array(), percentiles)


class Counts:
    """Many values (seconds), kept as how often each distinct value occurred."""

    def __init__(self) -> None:
        self.buffer = array("d")
        self.values = np.empty(0)
        self.counts = np.empty(0, dtype=np.int64)

    def extend(self, values: Iterable[float]) -> None:
        self.buffer.extend(values)
        if len(self.buffer) >= FOLD:
            self._fold()

    def _fold(self) -> None:
        if not self.buffer:
            return
        joined = np.concatenate([self.values, np.frombuffer(self.buffer, dtype=np.float64)])
        weights = np.concatenate([self.counts, np.ones(len(self.buffer), dtype=np.int64)])
        self.values, inverse = np.unique(joined, return_inverse=True)
        self.counts = np.bincount(inverse.ravel(), weights=weights, minlength=len(self.values)).astype(
            np.int64
        )
        self.buffer = array("d")

    def distribution_ms(self, percentiles: Iterable[float]) -> Distribution:
        self._fold()
        return distribution_of_counts_ms(self.values, self.counts, percentiles)


class _Peaks:
    """`peak_buckets` filled as requests come in order of their start: the first one's start is the origin."""

    def __init__(self) -> None:
        self.t_min: float | None = None
        self.t_max = -math.inf
        self.events = np.zeros(0, dtype=np.int64)
        self.flight = np.zeros(0, dtype=np.int64)  # +1 where a request's buckets begin, -1 after they end
        self.times = array("d")

    def add(self, r: RequestTimes) -> None:
        if self.t_min is None:
            self.t_min = r.start_s
        elif r.start_s < self.t_min:
            raise ValueError("requests must come in order of their start")
        self.t_max = max(self.t_max, r.start_s + r.e2el_s)
        first = int(r.start_s - self.t_min)
        after = int(r.start_s + r.e2el_s - self.t_min) + 1  # never past the last bucket: see peak_buckets
        self.flight = _grown(self.flight, after + 1)
        self.flight[first] += 1
        self.flight[after] -= 1
        self.times.extend(r.event_times_s)
        if len(self.times) >= FOLD:
            self._fold()

    def _fold(self) -> None:
        if self.t_min is None or not self.times:
            return
        k = (np.frombuffer(self.times, dtype=np.float64) - self.t_min).astype(np.int64)
        k = k[k >= 0]
        counts = np.bincount(k)
        self.events = _grown(self.events, len(counts))
        self.events[: len(counts)] += counts
        self.times = array("d")

    def result(self) -> tuple[float, int]:
        if self.t_min is None:
            return 0.0, 0
        self._fold()
        n = int(math.ceil(self.t_max - self.t_min)) + 1
        events = self.events[:n]
        in_flight = np.cumsum(self.flight)[:n]
        return float(events.max(initial=0)), int(in_flight.max(initial=0))


def _grown(a: np.ndarray, size: int) -> np.ndarray:
    """`a` with room for `size` entries (doubling, so growing one bucket at a time stays cheap)."""
    if len(a) >= size:
        return a
    out = np.zeros(max(size, 2 * len(a)), dtype=a.dtype)
    out[: len(a)] = a
    return out


class SummaryBuilder:
    """`summarize` of requests added one at a time, in order of their start."""

    def __init__(
        self,
        percentile_metrics: Iterable[str],
        percentiles: Sequence[float],
        goodput_slos_ms: Mapping[str, float],
    ) -> None:
        self.selected = set(percentile_metrics)
        self.percentiles = percentiles
        self.slos = goodput_slos_ms
        self.series: dict[str, Series] = {
            name: Series() for name in ("ttft", "tpot", "e2el") if name in self.selected
        }
        self.itl = Counts() if "itl" in self.selected else None
        self.peaks = _Peaks()
        self.completed = self.failed = self.good = 0
        self.total_in = self.total_out = 0

    def add(self, r: RequestTimes) -> None:
        if not r.ok:
            self.failed += 1
            return
        self.completed += 1
        self.total_in += r.prompt_len
        self.total_out += r.output_len
        if self.slos:
            self.good += good_requests([r], self.slos)
        if "ttft" in self.series:
            self.series["ttft"].add(r.ttft_s)
        if "e2el" in self.series:
            self.series["e2el"].add(r.e2el_s)
        if "tpot" in self.series and r.tpot_s is not None:
            self.series["tpot"].add(r.tpot_s)
        if self.itl is not None:
            self.itl.extend(r.itl_s)
        self.peaks.add(r)

    def summary(self, duration_s: float) -> ServingSummary:
        """The summary once every request is in (`duration_s` from the run start to the last request's
        end)."""
        dur = duration_s if duration_s > 0 else float("nan")
        peak_events, peak_concurrency = self.peaks.result()
        latency: dict[str, Distribution] = {}
        for name in LATENCY_METRICS:
            if name not in self.selected:
                continue
            source = self.itl if name == "itl" else self.series[name]
            assert source is not None  # built for every selected metric above
            latency[name] = source.distribution_ms(self.percentiles)
        return ServingSummary(
            duration=duration_s,
            completed=self.completed,
            failed=self.failed,
            total_input_tokens=self.total_in,
            total_output_tokens=self.total_out,
            request_throughput=self.completed / dur,
            request_goodput=self.good / dur if self.slos else None,
            output_throughput=self.total_out / dur,
            total_token_throughput=(self.total_in + self.total_out) / dur,
            max_output_tokens_per_s=peak_events,
            max_concurrent_requests=peak_concurrency,
            latency_ms=latency,
        )
