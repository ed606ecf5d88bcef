"""`servelab bench --trace` against the mock server (its own process; the command in the test's process,
tests/clirun.py, its load workers processes as a user's are; a real process for Ctrl-C): sessions replayed
with their waits and growing prompts, concurrency counted in sessions, per-turn and per-session metrics, the
server's prefix-cache hit rate from its counters, and every planned request ending as a record whatever stops
the run. Times are only checked as lower bounds: a busy machine can make a request later, never earlier."""

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from clirun import servelab

from servelab.bench.agentic.replay import KEY_STRIDE
from servelab.bench.agentic.trace import read_trace_file

CLI = [sys.executable, "-m", "servelab.cli.main", "bench"]
SAMPLE = Path(__file__).resolve().parents[1] / "data" / "inferencex" / "agentic" / "traces.jsonl"
EARLY_S = 0.005  # asyncio may run a timer up to its clock's resolution early


def bench(
    server, tmp_path: Path, *args: str, trace: Path = SAMPLE
) -> tuple[int, str, dict | None, list[dict]]:
    cmd = ["bench", "--base-url", server.url, "--model", "mock", "--trace", str(trace), "--save-result"]
    cmd += ["--result-dir", str(tmp_path), "--result-filename", "r.json", *args]
    p = servelab(*cmd)
    path = tmp_path / "r.json"
    result = json.loads(path.read_text()) if path.exists() else None
    records = (
        [json.loads(line) for line in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
        if result
        else []
    )
    return p.returncode, p.stderr + p.stdout, result, records


def metrics(server) -> dict[str, float]:
    text = urllib.request.urlopen(server.url + "/metrics").read().decode()
    return {
        line.split("{")[0]: float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:")
    }


@pytest.mark.slow  # 1.0 s of CPU a case: a whole bench with its load worker processes
def test_sessions_replay_their_waits_and_growing_prompts(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "2")
    rc, out, r, records = bench(s, tmp_path, "--endpoint", "/v1/chat/completions")
    assert rc == 0, out
    plans = read_trace_file(str(SAMPLE)).traces
    assert r["completed"] == sum(t.num_requests for t in plans) == len(records) and r["failed"] == 0
    by_key = {rec["i"]: rec for rec in records}
    for number, t in enumerate(plans):
        for req in t.requests:
            rec = by_key[number * KEY_STRIDE + req.index]
            # the mock counts prompt words: each prompt is exactly the trace's input tokens, one word each
            assert rec["in"] == req.input_tokens and rec["out"] == max(1, req.output_tokens)
            # a request leaves its recorded wait after what it follows, never before
            stream = t.streams[req.stream]
            if req.turn:
                follows = [stream[req.turn - 1]] + [t.streams[w][-1] for w in req.waits_for]
            elif req.stream:
                follows = [i for i in t.streams[0] if req.stream in t.requests[i].spawns]
            else:
                follows = []
            for i in follows:
                assert rec["sent"] >= by_key[number * KEY_STRIDE + i]["end"] + req.delay_s - EARLY_S
    a = r["agentic"]
    assert a["sessions"]["started"] == a["sessions"]["completed"] == 2
    assert [(p["trace_id"], p["requests"], p["completed"]) for p in a["per_session"]] == [
        (t.trace_id, t.num_requests, t.num_requests) for t in plans
    ]
    turns = a["per_turn"]
    assert [x["turn"] for x in turns] == list(range(6)) and [x["requests"] for x in turns] == [
        2,
        2,
        2,
        2,
        1,
        1,
    ]
    assert turns[0]["theoretical_hit_rate"] == 0 and turns[1]["theoretical_hit_rate"] > 0.5
    assert a["subagents"]["requests"] == 3
    # the server saw the history again turn after turn: its prefix cache hit. What the client read off the
    # mock's counters before and after the run is what the mock counted for the run: all it served but the
    # ready check, read before the run (a prompt of its own: it hit nothing)
    server = a["prefix_cache"]["server"]
    now = metrics(s)
    assert server["engine"] == "vllm" and server["queries"] == sum(rec["in"] for rec in records)
    assert now["vllm:prefix_cache_queries_total"] - server["queries"] == plans[0].requests[0].input_tokens
    assert server["hits"] == now["vllm:prefix_cache_hits_total"]
    assert 0.5 < server["hit_rate"] < 1 and 0.5 < a["prefix_cache"]["theoretical_hit_rate"] < 1


@pytest.mark.slow  # 0.9 s of CPU a case: a whole bench with its load worker processes
def test_concurrency_counts_sessions(mock_server, tmp_path):
    """Four sessions (each trace twice) two at a time: never more than two sessions between their first
    request and their last answer."""
    s = mock_server("--token-delay-ms", "1")
    rc, out, r, records = bench(
        s, tmp_path, "--num-prompts", "4", "--max-concurrency", "2", "--trace-max-gap", "0.05"
    )
    assert rc == 0, out
    spans = {}
    for rec in records:
        n = rec["i"] // KEY_STRIDE
        lo, hi = spans.get(n, (rec["sent"], rec["end"]))
        spans[n] = (min(lo, rec["sent"]), max(hi, rec["end"]))
    assert sorted(spans) == [0, 1, 2, 3]
    for n, (lo, _hi) in spans.items():
        assert sum(1 for m, (a, b) in spans.items() if m != n and a <= lo < b) <= 1
    assert [x["trace_id"] for x in r["agentic"]["per_session"]] == ["compaction", "main-subagents"] * 2
    assert r["num_prompts"] == 4 and r["agentic"]["replay"]["max_concurrency"] == 2


@pytest.mark.slow  # 1.6 s of CPU a case: a whole bench with its load worker processes
def test_replays_and_runs_share_no_text(mock_server, tmp_path):
    """The mock's prefix cache keeps everything, and a prompt's hits depend only on what its own session sent
    before it: so a run replaying each trace twice hits exactly twice what a run replaying it once does, on
    the same server after it, only if neither the second replay nor the second run reuses any text."""
    s = mock_server("--token-delay-ms", "1")
    rc, out, once, _ = bench(s, tmp_path / "once", "--trace-max-gap", "0.01")
    assert rc == 0, out
    rc, out, twice, _ = bench(s, tmp_path / "twice", "--num-prompts", "4", "--trace-max-gap", "0.01")
    assert rc == 0, out
    hits = once["agentic"]["prefix_cache"]["server"]["hits"]
    assert hits > 0 and twice["agentic"]["prefix_cache"]["server"]["hits"] == 2 * hits


@pytest.mark.slow  # 0.8 s of CPU a case: a whole bench with its load worker processes
def test_failed_requests_do_not_end_their_session(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "1", "--mode", "http500", "--fail-every", "3")
    rc, out, r, records = bench(s, tmp_path, "--trace-max-gap", "0.01", "--no-ready-check")
    assert rc == 1, out
    assert len(records) == 13 and all(rec["sent"] is not None for rec in records)
    assert r["failed"] == 4 and r["completed"] == 9  # the mock's 3rd, 6th, 9th and 12th requests
    assert r["agentic"]["sessions"]["with_failures"] == 2 and r["agentic"]["sessions"]["stopped"] == 0


def test_max_seconds_records_every_planned_request(mock_server, tmp_path):
    """Stopped by --max-seconds: the requests in flight finish, every other planned one is recorded as not
    sent with the reason, and that alone is no failure."""
    s = mock_server("--token-delay-ms", "1")
    rc, out, r, records = bench(s, tmp_path, "--max-seconds", "0.3", "--num-prompts", "4")
    assert rc == 0, out
    assert len(records) == 2 * 13 and len({rec["i"] for rec in records}) == 26
    not_sent = [rec for rec in records if rec["sent"] is None]
    assert not_sent and all("max seconds (0.3 s) reached" in rec["err"] for rec in not_sent)
    assert r["not_sent"] == len(not_sent) and r["completed"] == 26 - len(not_sent)
    assert r["agentic"]["sessions"]["stopped"] >= 2  # the two sessions never started, at least


@pytest.mark.slow  # 1.2 s of CPU a case: a whole bench with its load worker processes
def test_until_max_seconds_replays_traces_again_and_again(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "1")
    rc, out, r, records = bench(
        s, tmp_path, "--max-seconds", "2", "--max-concurrency", "2", "--trace-max-gap", "0.01"
    )
    assert rc == 0, out
    sessions = r["agentic"]["per_session"]
    assert len(sessions) > 2  # more than one pass over the two traces
    plans = {t.trace_id: t.num_requests for t in read_trace_file(str(SAMPLE)).traces}
    # every session that started has all its requests accounted for: answered or not sent
    assert all(x["requests"] == plans[x["trace_id"]] for x in sessions)
    assert r["agentic"]["replay"]["sessions"] is None and r["num_prompts"] == len(sessions)


@pytest.mark.slow  # 1.9 s of CPU a case: a whole bench with its load worker processes
def test_interrupt_keeps_every_planned_request(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "5")
    cmd = CLI + ["--base-url", s.url, "--model", "mock", "--trace", str(SAMPLE), "--num-prompts", "40"]
    cmd += [
        "--max-concurrency",
        "4",
        "--trace-max-gap",
        "0.2",
        "--save-result",
        "--result-dir",
        str(tmp_path),
    ]
    cmd += ["--result-filename", "r.json"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    # interrupt once the server has seen 20 requests: the ready check, at most 8 in flight (4 sessions, each
    # with at most a subagent beside its main agent), so more than 10 completed however busy the machine is
    while json.loads(urllib.request.urlopen(s.url + "/stats").read())["requests"] < 20:
        assert p.poll() is None and time.monotonic() < deadline, "the replay never got going"
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["interrupted"] is True and r["completed"] >= 11
    assert r["completed"] + r["failed"] + r["not_sent"] == 20 * 13  # 40 sessions, each trace 20 times


@pytest.mark.slow  # 0.9 s of CPU a case: a whole bench with its load worker processes
def test_unreadable_server_metrics_are_said_not_fatal(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "1")
    rc, out, r, _ = bench(
        s, tmp_path, "--server-metrics-url", "http://127.0.0.1:9/metrics", "--trace-max-gap", "0"
    )
    assert rc == 0, out
    server = r["agentic"]["prefix_cache"]["server"]
    assert server["engine"] is None and "127.0.0.1:9" in server["error"]
    assert "Prefix cache hit rate (server): not measured" in out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--request-rate", "5"], "no request_rate or ramp-up"),
        (["--dataset-path", "x.jsonl"], "--trace FILE is the dataset"),
        (["--max-seconds", "5"], "needs --max-concurrency"),
        (["--server-metrics-url", "localhost:8000/metrics"], "is not an http(s) URL"),
    ],
)
def test_bad_trace_options_are_refused(mock_server, tmp_path, args, expected):
    s = mock_server()
    rc, out, r, _ = bench(s, tmp_path, *args)
    assert rc == 2 and expected in out and r is None
    assert "Traceback" not in out
