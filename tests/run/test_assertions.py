"""The assertion grammar and how assertions are judged against medians of repetitions and a baseline."""

import pytest

from servelab.errors import ServelabError
from servelab.run.assertions import judge, lower_is_better, parse


def test_grammar_threshold_with_and_without_config():
    a = parse("bench.p99_ttft_ms <= 3000")
    assert (a.stage, a.config, a.metric, a.op, a.value, a.regress) == (
        "bench",
        None,
        "p99_ttft_ms",
        "<=",
        3000,
        False,
    )
    b = parse("  bench[8k-in-1k-out-conc-128].output_throughput>=1.5e3 ")
    assert (b.config, b.metric, b.op, b.value) == ("8k-in-1k-out-conc-128", "output_throughput", ">=", 1500.0)
    c = parse("gsm8k.exact_match,strict-match > .9")
    assert (c.stage, c.metric, c.value) == ("gsm8k", "exact_match,strict-match", 0.9)


def test_grammar_regression():
    a = parse("bench.median_tpot_ms regress <= 5%")
    assert a.regress and a.value == 5 and a.op == "<="


@pytest.mark.parametrize(
    "text, says",
    [
        ("p99_ttft_ms <= 3", "expected STAGE"),
        ("bench.p99_ttft_ms =< 3", "expected STAGE"),
        ("bench.p99_ttft_ms <= fast", "expected STAGE"),
        ("bench.p99_ttft_ms <= 5%", "a % bound is a regression"),
        ("bench.p99_ttft_ms regress <= 5", "a percentage"),
        ("bench[].x <= 1", "expected STAGE"),
    ],
)
def test_grammar_errors_are_one_line(text, says):
    with pytest.raises(ServelabError, match=says) as e:
        parse(text)
    assert "\n" not in str(e.value) and e.value.flag_message().startswith("--assert: ")


def test_every_config_must_pass_and_medians_are_judged():
    values = {
        ("bench", "a-conc-1"): {"p99_ttft_ms": [100.0, 900.0, 120.0]},  # median 120
        ("bench", "a-conc-8"): {"p99_ttft_ms": [400.0, 380.0, 5000.0]},  # median 400
    }
    [ok, bad, one] = judge(
        [
            parse("bench.p99_ttft_ms <= 500"),
            parse("bench.p99_ttft_ms < 300"),
            parse("bench[a-conc-1].p99_ttft_ms < 300"),
        ],
        values,
    )
    assert ok.outcome == "pass" and ok.observed == {"a-conc-1": 120.0, "a-conc-8": 400.0}
    assert bad.outcome == "fail" and "fails in a-conc-8" in bad.detail
    assert one.outcome == "pass" and one.observed == {"a-conc-1": 120.0}


def test_errors_name_what_is_missing():
    values = {("bench", "a-conc-1"): {"p99_ttft_ms": [1.0]}}
    judged = judge(
        [
            parse("gsm8k.exact_match >= 0.9"),
            parse("bench.no_such_metric <= 1"),
            parse("bench[b-conc-2].p99_ttft_ms <= 1"),
            parse("bench.p99_ttft_ms regress <= 5%"),
        ],
        values,
    )
    assert [j.outcome for j in judged] == ["error"] * 4
    assert "stage gsm8k produced no metrics" in judged[0].detail
    assert "no metric no_such_metric" in judged[1].detail
    assert "no config b-conc-2" in judged[2].detail
    assert "needs a baseline" in judged[3].detail


def test_regression_direction_follows_the_metric():
    base = {("bench", "c"): {"median_tpot_ms": [10.0], "output_throughput": [1000.0]}}
    now = {("bench", "c"): {"median_tpot_ms": [10.4], "output_throughput": [940.0]}}
    lat, tput, tput_loose = judge(
        [
            parse("bench.median_tpot_ms regress <= 5%"),
            parse("bench.output_throughput regress <= 5%"),
            parse("bench.output_throughput regress <= 6%"),
        ],
        now,
        base,
    )
    assert lat.outcome == "pass" and lat.observed["c"] == pytest.approx(4.0)
    assert tput.outcome == "fail" and tput.observed["c"] == pytest.approx(6.0)
    assert tput_loose.outcome == "pass"
    # an improvement is a negative regression
    [better] = judge(
        [parse("bench.median_tpot_ms regress <= 0%")], {("bench", "c"): {"median_tpot_ms": [9.0]}}, base
    )
    assert better.outcome == "pass" and better.observed["c"] == pytest.approx(-10.0)


def test_regression_needs_the_metric_in_the_baseline():
    [j] = judge(
        [parse("bench.x regress <= 5%")], {("bench", "c"): {"x": [1.0]}}, {("bench", "d"): {"x": [1.0]}}
    )
    assert j.outcome == "error" and "baseline has no bench[c].x" in j.detail


@pytest.mark.parametrize(
    "name, lower",
    [("p99_ttft_ms", True), ("median_e2el_ms", True), ("duration", True), ("failed", True),
     ("output_throughput", False), ("exact_match", False), ("request_throughput", False),
     ("accuracy", False)],
)  # fmt: skip
def test_direction(name, lower):
    assert lower_is_better(name) is lower
