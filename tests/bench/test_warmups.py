"""Warm-ups run at the benchmark's concurrency and say what they are doing (issue 15, item 1).

The mock server counts how many requests it had in flight at once (GET /stats), so the test reads the
overlap from the server itself rather than from timings."""

import json
import urllib.request
from subprocess import CompletedProcess

from clirun import servelab


def server_stats(server) -> dict:
    with urllib.request.urlopen(server.url + "/stats", timeout=10) as resp:
        return json.loads(resp.read())


def run_warmups(server, *args: str) -> CompletedProcess:
    # one benchmark request and a ready check: each alone, so any overlap the server saw came from warm-ups
    cmd = ["bench", "--base-url", server.url, "--model", "mock", "--random-input-len", "8"]
    cmd += ["--random-output-len", "4", "--num-prompts", "1", *args]
    return servelab(*cmd)  # in-process (tests/clirun.py); its load worker is a process


def test_warmups_overlap_up_to_max_concurrency(mock_server):
    # each response takes 1 s, far longer than sending 4 requests, so all 4 are in flight at once
    s = mock_server("--first-token-delay-ms", "1000", "--token-delay-ms", "5")
    p = run_warmups(s, "--num-warmups", "8", "--max-concurrency", "4", "--num-workers", "1")
    assert p.returncode == 0, p.stderr
    stats = server_stats(s)
    assert stats["requests"] == 1 + 8 + 1  # ready check, warm-ups, the benchmark's request
    assert stats["max_in_flight"] == 4
    assert "warm-up: 8 requests at concurrency 4" in p.stderr
    assert "warm-up: 8 done, 0 failed" in p.stderr


def test_rate_run_warmups_are_unbounded(mock_server):
    s = mock_server("--first-token-delay-ms", "1000", "--token-delay-ms", "5")
    p = run_warmups(s, "--num-warmups", "6", "--request-rate", "10", "--num-workers", "2")
    assert p.returncode == 0, p.stderr
    assert server_stats(s)["max_in_flight"] == 6
    assert "warm-up: 6 requests at concurrency unbounded" in p.stderr
