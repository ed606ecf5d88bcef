"""Comparing runs and groups of runs: medians, change in %, and Welch's t-test p-value."""

import pytest

from servelab.results.compare import betainc, compare, welch_p_value
from servelab.results.store import Store


@pytest.mark.parametrize(
    ("t", "df", "p"),
    [(2.0, 10, 0.073388), (2.228, 10, 0.050012), (1.0, 3, 0.391002), (3.0, 1, 0.204833)],
)
def test_two_sided_t_p_values_match_the_t_distribution(t, df, p):
    # reference values: 2 * (1 - CDF of Student's t), from statistical tables
    assert betainc(df / 2, 0.5, df / (df + t * t)) == pytest.approx(p, abs=2e-6)


def test_welch_p_value():
    assert welch_p_value([1.0], [2.0, 3.0]) is None
    assert welch_p_value([5.0, 5.0], [5.0, 5.0]) == 1.0
    assert welch_p_value([5.0, 5.0], [6.0, 6.0]) == 0.0
    # Welch's t = 1.5635, df = 5.31 for these samples: p = 0.1765
    assert welch_p_value([1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 4.0, 5.0, 9.0]) == pytest.approx(0.17650, abs=1e-4)


def _run(store, name, config, ttfts, throughput=None):
    run_id = store.start_run(name)
    for rep, ttft in enumerate(ttfts):
        values = {"p99_ttft_ms": ttft} | ({"output_throughput": throughput} if throughput else {})
        store.record_metrics(
            run_id, "bench", values, config=config, repetition=rep, units={"p99_ttft_ms": "ms"}
        )
    store.finish_run(run_id, "pass")
    return run_id


def test_groups_by_name_with_repetitions(tmp_path):
    with Store.open(tmp_path / "r.db") as store:
        _run(store, "base", "random-conc-8", [100.0, 102.0, 98.0])
        _run(store, "base", "random-conc-8", [101.0, 99.0])
        _run(store, "new", "random-conc-8", [80.0, 82.0, 78.0], throughput=10.0)
        only_a = _run(store, "base", "random-conc-16", [5.0])
        result = compare(store, "base", "new")
        assert len(result.runs_a) == 3 and len(result.runs_b) == 1
        [row] = result.rows
        assert (row.stage, row.config, row.metric, row.unit) == (
            "bench",
            "random-conc-8",
            "p99_ttft_ms",
            "ms",
        )
        assert (len(row.a), len(row.b), row.median_a, row.median_b) == (5, 3, 100.0, 80.0)
        assert row.change_pct == pytest.approx(-20.0)
        assert row.p_value is not None and row.p_value < 0.001
        assert (result.only_a, result.only_b) == (1, 1)  # conc-16 ttft only in A, throughput only in B

        single = compare(store, only_a, "new", ["*ttft*"])  # a run id on one side, a glob on the metrics
        assert single.rows == [] and (single.only_a, single.only_b) == (1, 1)
