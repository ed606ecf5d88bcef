"""Metric definitions against hand-computed examples (vLLM's calculate_metrics in
vllm/benchmarks/serve.py)."""

import math

import numpy as np
import pytest

from servelab.bench.measured import derive
from servelab.metrics import (
    distribution_ms,
    good_requests,
    percentile,
    summarize,
    weighted_distribution_ms,
)


def rec(sent, chunks_ms, out, ok=True, sched=None, slot=None, prompt=10):
    return {
        "i": 0,
        "ok": ok,
        "sent": sent,
        "sched": sent if sched is None else sched,
        "slot": (sent if sched is None else sched) if slot is None else slot,
        "chunks": [int(c * 1000) for c in chunks_ms],
        "in": prompt,
        "out": out,
    }


def test_per_request_definitions():
    # first content event at 50 ms, then 4 more at 60, 70, 90, 100 ms; 5 tokens
    r = derive(rec(1.0, [50, 60, 70, 90, 100], 5), 5)
    assert r.ttft_s == pytest.approx(0.050)
    assert r.e2el_s == pytest.approx(0.100)
    assert r.itl_s == pytest.approx([0.010, 0.010, 0.020, 0.010])
    assert r.tpot_s == pytest.approx((0.100 - 0.050) / 4)  # (E2EL - TTFT) / (out - 1)


def test_tpot_uses_token_count_not_chunks():
    # 3 content chunks carried 7 tokens (usage): TPOT divides by 6, ITL stays per chunk
    r = derive(rec(0.0, [20, 50, 80], 7), 7)
    assert r.tpot_s == pytest.approx(0.060 / 6)
    assert r.itl_s == pytest.approx([0.030, 0.030])


def test_single_token_has_no_tpot():
    r = derive(rec(0.0, [20], 1), 1)
    assert r.tpot_s is None and r.itl_s == []


def test_scheduled_time_and_client_lag():
    # scheduled at 1.000, slot free at 1.004 (queued 4 ms), sent at 1.005 (1 ms client lag)
    r = derive(rec(1.005, [30, 40], 2, sched=1.000, slot=1.004), 2)
    assert r.ttft_s == pytest.approx(0.030)
    assert r.ttft_from_sched_s == pytest.approx(0.035)
    assert r.e2el_from_sched_s == pytest.approx(0.045)
    assert r.queue_wait_s == pytest.approx(0.004)
    assert r.client_lag_s == pytest.approx(0.001)


def test_aggregate_hand_computed():
    a = derive(rec(0.0, [100, 200, 300], 3, prompt=10), 3)  # ttft 100, e2el 300, tpot 100
    b = derive(rec(0.5, [300, 400], 2, prompt=20), 2)  # ttft 300, e2el 400, tpot 100
    f = derive(rec(0.2, [], None, ok=False, prompt=30), 0)
    # content events on the run clock: a at 0.1, 0.2, 0.3; b at 0.8, 0.9
    out = summarize(
        [a, b, f],
        duration_s=2.0,
        percentile_metrics=["ttft", "tpot", "itl", "e2el"],
        percentiles=[50, 99],
        goodput_slos_ms={"ttft": 200},
    ).fields()
    assert out["completed"] == 2 and out["failed"] == 1
    assert out["total_input_tokens"] == 30  # failed requests do not count
    assert out["total_output_tokens"] == 5
    assert out["request_throughput"] == pytest.approx(1.0)
    assert out["output_throughput"] == pytest.approx(2.5)
    assert out["total_token_throughput"] == pytest.approx(17.5)
    assert out["request_goodput"] == pytest.approx(0.5)  # only a meets ttft <= 200 ms
    assert out["mean_ttft_ms"] == pytest.approx(200.0)
    assert out["median_ttft_ms"] == pytest.approx(200.0)
    assert out["std_ttft_ms"] == pytest.approx(100.0)
    assert out["p99_ttft_ms"] == pytest.approx(100 + 0.99 * 200)  # linear interpolation
    assert out["p50_ttft_ms"] == pytest.approx(200.0)
    assert out["mean_tpot_ms"] == pytest.approx(100.0)
    assert out["mean_itl_ms"] == pytest.approx(100.0)  # gaps 100, 100, 100
    assert out["mean_e2el_ms"] == pytest.approx(350.0)
    # buckets from the first start (0.0): second 0 holds 0.1, 0.2, 0.3, 0.8, 0.9 -> 5 events
    assert out["max_output_tokens_per_s"] == 5.0
    assert out["max_concurrent_requests"] == 2


def test_only_selected_metrics_are_reported_and_percentile_names():
    a = derive(rec(0.0, [10, 20], 2), 2)
    out = summarize([a], 1.0, ["ttft"], [99.9, 50], {}).fields()
    assert "mean_ttft_ms" in out and "p99.9_ttft_ms" in out and "p50_ttft_ms" in out
    assert "mean_itl_ms" not in out and "mean_e2el_ms" not in out
    assert out["request_goodput"] is None  # vLLM writes None without --goodput


def test_goodput_counts_tpot_as_zero_for_single_token():
    one = derive(rec(0.0, [10], 1), 1)
    assert good_requests([one], {"tpot": 0.0}) == 1


def test_empty_run_reports_zeros_like_vllm():
    out = summarize([], 0.0, ["ttft"], [99], {}).fields()
    assert out["completed"] == 0 and out["mean_ttft_ms"] == 0.0
    assert math.isnan(out["request_throughput"])


def test_percentile_is_numpys_linear_rule():
    values = sorted([3.0, 1.0, 4.0, 1.5, 9.2, 2.6, 5.3])
    for p in (0, 10, 50, 90, 99, 99.9, 100):
        assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)))


def test_distribution_reports_ms_and_vllm_percentile_words():
    d = distribution_ms([0.1, 0.3], [50, 99.9])
    assert (d.mean, d.median, d.std, d.max) == pytest.approx((200.0, 200.0, 100.0, 300.0))
    assert set(d.percentiles) == {"50", "99.9"}


def test_weighted_runs_interpolate_between_run_centres():
    # a stretch of 3 steps of 10 ms (centre at 37.5 % of the ranks) and one of 30 ms (centre at 87.5 %)
    d = weighted_distribution_ms([(0.010, 3), (0.030, 1)], [50, 99])
    assert d.mean == pytest.approx(15.0)
    assert d.percentiles["50"] == pytest.approx(10.0 + 20.0 * (50 - 37.5) / (87.5 - 37.5))
    assert d.percentiles["99"] == pytest.approx(30.0)  # flat beyond the last centre
