"""The automatic rate sweep (`--request-rate sweep`): synchronous, throughput, then rates between."""

import json
import math
from types import SimpleNamespace

import pytest
from clirun import servelab

from servelab.bench.rate_sweep import SweepStep, between, rate_sweep


def measured(rate: float) -> SimpleNamespace:
    return SimpleNamespace(summary=SimpleNamespace(request_throughput=rate))


def test_the_generator_measures_first_then_spaces_rates_between():
    steps = rate_sweep(3, 16)
    assert next(steps) == SweepStep("synchronous", 1, math.inf)
    assert steps.send(measured(2.0)) == SweepStep("throughput", 16, math.inf)
    rates = [steps.send(measured(10.0)).request_rate]
    rates += [steps.send(measured(r)).request_rate for r in (4.0, 6.0)]
    assert rates == [4.0, 6.0, 8.0]
    with pytest.raises(StopIteration) as stop:
        steps.send(measured(8.0))
    assert stop.value.value is None


def test_no_rates_when_the_server_does_not_scale():
    steps = rate_sweep(3, None)
    next(steps)
    steps.send(measured(5.0))
    with pytest.raises(StopIteration) as stop:
        steps.send(measured(5.0))
    assert "no rates to sweep" in stop.value.value


def test_between_is_strict_and_even():
    assert between(1.0, 5.0, 3) == [2.0, 3.0, 4.0]


def test_cli_sweep_writes_a_result_per_step(mock_server, tmp_path):
    s = mock_server("--first-token-delay-ms", "20", "--token-delay-ms", "10")  # 50 ms a request
    cmd = ["bench", "--base-url", s.url, "--model", "mock"]
    cmd += ["--random-input-len", "8", "--random-output-len", "4", "--num-prompts", "16"]
    cmd += ["--request-rate", "sweep", "--sweep-rates", "2", "--max-concurrency", "8"]
    cmd += ["--save-result", "--result-dir", str(tmp_path), "--result-filename", "s.json"]
    p = servelab(*cmd)
    assert p.returncode == 0, p.stderr
    assert "servelab bench sweep" in p.stdout
    r = {f.stem[2:]: json.loads(f.read_text()) for f in tmp_path.glob("s-*.json")}
    rate_steps = sorted(r[n]["request_rate"] for n in r if n.startswith("rate"))
    assert len(r) == 4 and len(rate_steps) == 2
    sync, peak = r["synchronous"], r["throughput"]
    assert sync["max_concurrency"] == 1 and peak["max_concurrency"] == 8
    low, high = sync["request_throughput"], peak["request_throughput"]
    assert rate_steps == pytest.approx([low + (high - low) / 3, low + 2 * (high - low) / 3], rel=1e-9)
    assert all(x["completed"] == 16 for x in r.values())


def test_sweep_with_a_concurrency_list_is_bad_input():
    cmd = ["bench", "--model", "m", "--request-rate", "sweep"]
    p = servelab(*cmd + ["--max-concurrency", "1,2"])
    assert p.returncode == 2 and p.stderr.startswith("error: --request-rate sweep")
