"""`--max-seconds`: stop sending after that long, let the requests in flight finish, report what completed."""

import json

import pytest
from clirun import servelab


@pytest.mark.parametrize("load", [["--max-concurrency", "2"], ["--request-rate", "40"]])
def test_max_seconds_stops_sending_and_finishes_in_flight(mock_server, tmp_path, load):
    s = mock_server("--first-token-delay-ms", "50", "--token-delay-ms", "50")  # 0.2 s per request
    cmd = [
        "bench",
        "--base-url",
        s.url,
        "--model",
        "mock",
        "--random-input-len",
        "8",
        "--random-output-len",
        "4",
    ]
    cmd += ["--num-prompts", "1000", "--max-seconds", "1", "--num-workers", "1", *load]
    cmd += ["--save-result", "--result-dir", str(tmp_path), "--result-filename", "r.json"]
    p = servelab(*cmd)  # 1000 requests would take > 25 s
    assert p.returncode == 0, p.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["failed"] == 0 and r["completed"] >= 1  # in-flight requests finished, none cancelled
    assert r["completed"] + r["not_sent"] == 1000 and r["not_sent"] > 0
    assert list(r["failure_reasons"]) == ["not sent: max seconds (1.0 s) reached"]
    assert r["duration"] >= 1.0
    assert r["config"]["max_seconds"] == 1.0
