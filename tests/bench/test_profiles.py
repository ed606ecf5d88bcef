"""GuideLLM's profiles (`--profile`), its cool-down (`--cool-down`) and one run written as json, yaml, csv and
html (`--outputs`): the flags each profile stands for, evenly spaced arrivals, the tail left out of the
metrics, and the files against the mock server."""

import csv
import json
import math
from itertools import pairwise

import pytest
import yaml
from clirun import servelab

from servelab.bench.profiles import Load, apply_profile
from servelab.results.report import result_points
from servelab.traffic.schedule import arrival_offsets

NONE = Load(None, None, 1.0)


@pytest.mark.parametrize(
    ("profile", "given", "load"),
    [
        ("synchronous", NONE, Load("1", None, 1.0)),
        ("throughput", Load("64", None, 1.0), Load("64", None, 1.0)),
        ("concurrent", Load("8", None, 1.0), Load("8", None, 1.0)),
        ("constant", Load(None, "5", 1.0), Load(None, "5", math.inf)),
        ("constant", Load("32", "1,5,10", 1.0), Load("32", "1,5,10", math.inf)),
        ("poisson", Load(None, "5", 1.0), Load(None, "5", 1.0)),
        ("sweep", Load("16", None, 1.0), Load("16", "sweep", 1.0)),
        (None, Load("4", "2", 3.0), Load("4", "2", 3.0)),
    ],
)
def test_each_profile_is_the_load_flags_it_names(profile, given, load):
    assert apply_profile(profile, given) == load


@pytest.mark.parametrize(
    ("profile", "given", "message"),
    [
        ("constant", NONE, "--profile constant needs --request-rate R"),
        ("constant", Load(None, "inf", 1.0), "needs --request-rate R"),
        ("constant", Load(None, "5", 2.0), "--profile constant sets the arrivals: no --burstiness"),
        ("synchronous", Load("4", None, 1.0), "one request at a time: no --max-concurrency"),
        ("throughput", Load(None, "5", 1.0), "a closed loop: no --request-rate"),
        ("concurrent", NONE, "--profile concurrent needs --max-concurrency N"),
        ("sweep", Load(None, "5", 1.0), "chooses its own rates"),
        ("bursty", NONE, "expected one of synchronous, throughput, concurrent, constant, poisson, sweep"),
    ],
)
def test_a_profile_refuses_flags_that_contradict_it(profile, given, message):
    with pytest.raises(ValueError, match=message):
        apply_profile(profile, given)


def test_constant_arrivals_are_evenly_spaced():
    offsets = arrival_offsets(10, 4.0, burstiness=math.inf)
    assert offsets == pytest.approx([(i + 1) / 4.0 for i in range(10)])


def test_one_run_as_json_yaml_csv_and_html_with_a_cool_down(mock_server, tmp_path):
    server = mock_server("--first-token-delay-ms", "10", "--token-delay-ms", "2")
    cmd = ["bench", "--base-url", server.url, "--model", "mock",
           "--random-input-len", "8", "--random-output-len", "8", "--num-prompts", "20",
           "--profile", "constant", "--request-rate", "40,80", "--cool-down", "0.1",
           "--outputs", "yaml,csv,html", "--result-filename", "run.json"]  # fmt: skip
    r = servelab(*cmd, cwd=tmp_path)  # in-process (tests/clirun.py); its load worker is a process
    assert r.returncode == 0, r.stderr
    results = sorted(tmp_path.glob("run-*.json"))
    assert [p.name for p in results] == ["run-cNone-r40.0.json", "run-cNone-r80.0.json"]
    for path in results:
        data = json.loads(path.read_text())
        assert data["burstiness"] == "inf" and data["config"]["cool_down_s"] == 0.1
        # arrivals evenly spaced at the rate: the schedule, not a timing
        records = [
            json.loads(x) for x in path.with_name(path.stem + ".requests.jsonl").read_text().splitlines()
        ]
        scheduled = sorted(x["sched"] for x in records)
        gaps = [b - a for a, b in pairwise(scheduled)]
        assert gaps == pytest.approx([1 / data["request_rate"]] * 19)
        # the cool-down: successes that ended in the last 0.1 s are left out, the duration ends before it
        until = max(x["end"] for x in records) - 0.1
        cooled = sum(1 for x in records if x["ok"] and x["end"] > until)
        assert data["cool_down"] == {"seconds": 0.1, "excluded_requests": cooled, "measured_until_s": until}
        assert data["completed"] + cooled == 20 and data["duration"] == pytest.approx(until)
        assert yaml.safe_load(path.with_suffix(".yaml").read_text()) == data
    rows = list(csv.DictReader((tmp_path / "run.csv").open()))
    assert [float(row["request_rate"]) for row in rows] == [40.0, 80.0]
    assert [int(row["completed"]) for row in rows] == [
        json.loads(p.read_text())["completed"] for p in results
    ]
    assert rows[0]["config.seed"] == "0" and "ttfts" not in rows[0]
    page = (tmp_path / "run.html").read_text()
    assert page.count('class="view"') == 3 and "run-cNone-r40.0.requests.jsonl" in page
    assert [p.samples_from for p in result_points(results[0])] == ["run-cNone-r40.0.requests.jsonl"]
    assert r.stdout.strip().splitlines()[-1] == "wrote: " + ", ".join(
        [
            "run-cNone-r40.0.json",
            "run-cNone-r80.0.json",
            "run-cNone-r40.0.yaml",
            "run-cNone-r80.0.yaml",
            "run.csv",
            "run.html",
        ]  # fmt: skip
    )
