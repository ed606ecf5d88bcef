"""The summary built one request at a time (servelab.metrics.streaming) against `summarize` on the same
requests: equal fields, but for means and standard deviations, which may differ in their last bits (the
order of the additions differs)."""

import random

import pytest

from servelab.metrics import RequestTimes, distribution_ms, summarize
from servelab.metrics.streaming import Counts, Series, SummaryBuilder

PERCENTILES = [50.0, 90.0, 99.0, 99.9]
METRICS = ["ttft", "tpot", "itl", "e2el"]
ROUGH = ("mean", "std")  # the fields summed in another order


def requests(n: int, seed: int) -> list[RequestTimes]:
    """Requests in order of their start, on a microsecond clock like measured ones, some failed, some of one
    token, some whose tokens came in one read (gaps of 0)."""
    rng = random.Random(seed)
    out, start_us = [], 0
    for k in range(n):
        start_us += rng.randint(0, 40_000)
        if rng.random() < 0.05:
            out.append(RequestTimes(ok=False, prompt_len=rng.randint(1, 50), output_len=0))
            continue
        tokens = rng.choice([1, 2, 8, 32])
        chunks, t = [], rng.randint(1_000, 90_000)
        for _ in range(tokens):
            chunks.append(t)
            t += 0 if k % 11 == 0 else rng.randint(200, 4_000)
        start = start_us / 1e6
        ttft, e2el = chunks[0] / 1e6, chunks[-1] / 1e6
        out.append(
            RequestTimes(
                ok=True,
                prompt_len=rng.randint(1, 500),
                output_len=tokens,
                start_s=start,
                ttft_s=ttft,
                e2el_s=e2el,
                itl_s=[(b - a) / 1e6 for a, b in zip(chunks, chunks[1:], strict=False)],
                tpot_s=(e2el - ttft) / (tokens - 1) if tokens > 1 else None,
                event_times_s=[start + c / 1e6 for c in chunks],
            )
        )
    return out


def assert_same_distribution(ours, theirs) -> None:
    for name in ("median", "max"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.percentiles == theirs.percentiles
    for name in ROUGH:
        assert getattr(ours, name) == pytest.approx(getattr(theirs, name), rel=1e-12, abs=1e-12), name


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_streamed_summary_is_summarize(seed):
    reqs = requests(3_000, seed)
    slos = {"ttft": 60.0, "tpot": 2.0}
    builder = SummaryBuilder(METRICS, PERCENTILES, slos)
    for r in reqs:
        builder.add(r)
    ours, theirs = builder.summary(61.5), summarize(reqs, 61.5, METRICS, PERCENTILES, slos)
    assert {k: v for k, v in ours.fields().items() if not k.startswith(("mean_", "std_"))} == {
        k: v for k, v in theirs.fields().items() if not k.startswith(("mean_", "std_"))
    }
    assert ours.max_output_tokens_per_s > 0 and ours.max_concurrent_requests > 1  # the peaks were counted
    assert ours.request_goodput is not None and 0 < ours.request_goodput < ours.request_throughput
    for name in METRICS:
        assert_same_distribution(ours.latency_ms[name], theirs.latency_ms[name])


def test_only_selected_metrics_are_kept():
    builder = SummaryBuilder(["ttft"], PERCENTILES, {})
    for r in requests(50, 4):
        builder.add(r)
    assert set(builder.series) == {"ttft"} and builder.itl is None
    assert list(builder.summary(3.0).latency_ms) == ["ttft"]


def test_an_empty_run_reports_zeros_like_summarize():
    ours = SummaryBuilder(METRICS, PERCENTILES, {}).summary(0.0)
    theirs = summarize([], 0.0, METRICS, PERCENTILES, {})
    assert str(ours.fields()) == str(theirs.fields())  # NaN throughputs compare as text


def test_requests_out_of_start_order_are_refused():
    a, b = [r for r in requests(40, 5) if r.ok][10:12]
    assert a.start_s < b.start_s
    builder = SummaryBuilder(METRICS, PERCENTILES, {})
    builder.add(b)
    with pytest.raises(ValueError, match="order of their start"):
        builder.add(a)


def test_gaps_kept_as_counts_read_as_the_whole_list():
    rng = random.Random(6)
    gaps = [rng.randint(0, 5_000) / 1e6 for _ in range(200_000)]  # more than one fold
    counts = Counts()
    for k in range(0, len(gaps), 1_000):
        counts.extend(gaps[k : k + 1_000])
    assert_same_distribution(counts.distribution_ms(PERCENTILES), distribution_ms(gaps, PERCENTILES))
    assert len(counts.values) <= 5_001 and int(counts.counts.sum()) == len(gaps)  # a value a microsecond


def test_a_series_reads_as_its_list():
    rng = random.Random(7)
    values = [rng.random() for _ in range(1_001)]
    series = Series()
    for v in values:
        series.add(v)
    assert len(series) == 1_001
    assert_same_distribution(series.distribution_ms(PERCENTILES), distribution_ms(values, PERCENTILES))
