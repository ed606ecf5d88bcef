"""Whole runs of `servelab bench` against the mock server (its own process): the command in the test's process
(tests/clirun.py: its load workers are processes as a user's are), a real process for Ctrl-C.

The measured values must match what the mock was set to, and every misbehaviour must end as
counted failures with reasons, partial results saved and a non-zero exit code.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from itertools import pairwise
from pathlib import Path

import pytest
from clirun import servelab

from servelab.bench.records import read_jsonl

CLI = [sys.executable, "-m", "servelab.cli.main", "bench"]


def bench(server, tmp_path: Path, *args: str) -> tuple[int, str, str, dict | None]:
    cmd = [
        "bench",
        "--base-url",
        server.url,
        "--model",
        "mock",
        "--random-input-len",
        "16",
        "--save-result",
        "--result-dir",
        str(tmp_path),
        "--result-filename",
        "r.json",
        *args,
    ]
    p = servelab(*cmd)
    path = tmp_path / "r.json"
    return p.returncode, p.stdout, p.stderr, json.loads(path.read_text()) if path.exists() else None


def test_measures_what_the_mock_was_set_to(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "20", "--first-token-delay-ms", "60")
    rc, out, err, r = bench(
        s,
        tmp_path,
        "--random-output-len",
        "16",
        "--num-prompts",
        "16",
        "--max-concurrency",
        "4",
        "--save-detailed",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--num-workers",
        "2",
    )
    assert rc == 0, err
    assert r["completed"] == 16 and r["failed"] == 0
    assert r["output_lens"] == [16] * 16 and r["total_output_tokens"] == 256
    assert r["token_count_source"] == "usage"
    # The mock sleeps at least what it was set to and a busy machine can only add to it, so the first-token
    # delay and the whole request's are lower bounds. The gaps between tokens are not: a token read late
    # shortens the gap after it (CI once saw a median ITL of 18.7 ms against the mock's 20), so they are
    # checked for adding up, which does not depend on the machine at all.
    assert 59 <= r["mean_ttft_ms"] < r["mean_e2el_ms"]
    assert r["mean_e2el_ms"] >= 60 + 15 * 20 - 1
    for ttft, itls, latency in zip(r["ttfts"], r["itls"], r["latencies"], strict=True):
        assert ttft >= 0.059 and latency >= 0.359
        assert ttft + sum(itls) == pytest.approx(latency, abs=1e-6)
    # every request has 16 tokens: TPOT = (E2EL - TTFT) / 15 for each, so for the means too
    assert r["mean_tpot_ms"] == pytest.approx((r["mean_e2el_ms"] - r["mean_ttft_ms"]) / 15)
    # 4 streams each at least 0.36 s -> at most about 11 req/s; throughput is requests over the run's duration
    assert 0 < r["request_throughput"] <= 4 / 0.36 * 1.02
    assert r["request_throughput"] == pytest.approx(r["completed"] / r["duration"])
    for field in (
        "date",
        "endpoint_type",
        "backend",
        "label",
        "model_id",
        "tokenizer_id",
        "num_prompts",
        "request_rate",
        "burstiness",
        "max_concurrency",
        "duration",
        "total_input_tokens",
        "request_goodput",
        "output_throughput",
        "total_token_throughput",
        "max_output_tokens_per_s",
        "max_concurrent_requests",
        "std_ttft_ms",
        "p99_itl_ms",
        "input_lens",
        "ttfts",
        "itls",
        "generated_texts",
        "errors",
        "version",
        "config",
        "client",
        "client_bottleneck_warning",
    ):
        assert field in r, field
    assert r["request_rate"] == "inf" and r["max_concurrency"] == 4
    assert len(r["itls"][0]) == 15
    assert "Serving Benchmark Result" in out
    lines = Path(r["records_file"]).read_text().splitlines()
    assert len(lines) == 16
    assert r["client"]["num_workers"] == 2 and {json.loads(x)["w"] for x in lines} == {0, 1}
    # the client's host, as this machine describes itself, and printed with the client's figures
    assert r["client"]["host_cores"] == os.cpu_count()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        models = {
            line.split(":", 1)[1].strip()
            for line in cpuinfo.read_text().splitlines()
            if line.startswith("model name")
        }
        assert r["client"]["host_cpu"] in models
    assert f"{r['client']['host_cpu']} ({os.cpu_count()})" in out


def test_chat_endpoint_and_api_key_is_never_written(mock_server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-123")
    s = mock_server("--token-delay-ms", "5")
    rc, out, err, r = bench(
        s,
        tmp_path,
        "--endpoint",
        "/v1/chat/completions",
        "--random-output-len",
        "8",
        "--num-prompts",
        "8",
        "--max-concurrency",
        "2",
        "--save-detailed",
    )
    assert rc == 0, err
    assert r["backend"] == "openai-chat" and r["completed"] == 8
    assert r["output_lens"] == [8] * 8
    # the chat role chunk counts as the first content event (vLLM does the same): 1 + 8 events
    assert all(len(x) == 8 for x in r["itls"])
    everything = out + err + "".join(p.read_text() for p in tmp_path.iterdir() if p.is_file())
    assert "sk-secret-123" not in everything


@pytest.mark.parametrize("endpoint", ["/v1/chat/completions", "/v1/completions"])
def test_ttft_at_first_content(mock_server, tmp_path, endpoint):
    """--ttft-at first-content (GuideLLM's rule): on the chat API the role event, sent at once, is left out
    and TTFT is the first token's, no sooner than the mock's 60 ms; the completions API has no such event."""
    s = mock_server("--first-token-delay-ms", "60", "--token-delay-ms", "2")
    load = ("--endpoint", endpoint, "--random-output-len", "8", "--num-prompts", "6", "--save-detailed")
    (tmp_path / "event").mkdir()
    (tmp_path / "content").mkdir()
    rc, _, err, first_event = bench(s, tmp_path / "event", *load)
    assert rc == 0, err
    rc, _, err, first_content = bench(s, tmp_path / "content", *load, "--ttft-at", "first-content")
    assert rc == 0, err
    assert first_content["config"]["ttft_at"] == "first-content"
    chat = endpoint.endswith("chat/completions")
    records = list(read_jsonl(Path(first_content["records_file"])))
    assert {r["lead"] for r in records} == {1 if chat else 0}
    assert {len(r["chunks"]) for r in records} == {8}  # one event per token
    assert all(len(x) == 7 for x in first_content["itls"])
    assert min(first_content["ttfts"]) >= 0.059  # a lower bound only: a loaded machine delays, never hastens
    assert all(len(x) == (8 if chat else 7) for x in first_event["itls"])  # the role event counted


def test_a_whole_answer_in_one_read_is_counted_and_warned(mock_server, tmp_path):
    """Every other response arrives as one burst: those requests read TPOT 0, and the result says how many.
    A streamed response can be read in one go too, when the client reads late enough that all its tokens wait
    in the socket (CI once counted 6 of 10 at 2 ms a token): so the bursts are a lower bound, and 20 ms a
    token keeps most streamed responses streamed however busy the machine."""
    s = mock_server("--token-delay-ms", "20", "--mode", "burst", "--fail-every", "2")
    rc, out, err, r = bench(
        s,
        tmp_path,
        "--random-output-len",
        "8",
        "--num-prompts",
        "10",
        "--max-concurrency",
        "2",
        "--no-ready-check",
        "--save-detailed",
    )
    assert rc == 0 and r["completed"] == 10 and r["output_lens"] == [8] * 10
    bursts = [i for i, itl in enumerate(r["itls"]) if not any(itl)]
    assert 5 <= len(bursts) < 10 and r["one_read_requests"] == len(bursts)
    said = f"{len(bursts)} of 10 streamed requests received all their tokens in one socket read"
    assert said in r["one_read_warning"]
    assert f"WARNING: {len(bursts)} of 10 streamed requests" in err


@pytest.mark.parametrize(
    "mode,reason",
    [
        ("http500", "HTTP 500"),
        ("truncate", "truncated stream"),
        ("malformed", "malformed SSE"),
        ("error-event", "error event in stream"),
    ],
)
def test_misbehaving_server_counts_failures_with_reasons(mock_server, tmp_path, mode, reason):
    s = mock_server("--token-delay-ms", "2", "--mode", mode, "--fail-every", "2")
    rc, out, err, r = bench(
        s,
        tmp_path,
        "--random-output-len",
        "8",
        "--num-prompts",
        "10",
        "--max-concurrency",
        "3",
        "--no-ready-check",
    )
    assert rc == 1
    assert r["completed"] == 5 and r["failed"] == 5
    assert len(r["failure_reasons"]) == 1
    assert next(iter(r["failure_reasons"])).startswith(reason)
    assert reason in out  # printed too


def test_hanging_server_times_out(mock_server, tmp_path):
    s = mock_server("--mode", "hang", "--fail-every", "3", "--token-delay-ms", "2")
    rc, out, err, r = bench(
        s,
        tmp_path,
        "--random-output-len",
        "4",
        "--num-prompts",
        "6",
        "--max-concurrency",
        "6",
        "--request-timeout",
        "1",
        "--no-ready-check",
    )
    assert rc == 1
    assert r["failed"] == 2 and r["completed"] == 4
    assert next(iter(r["failure_reasons"])).startswith("timeout")


def test_server_dying_mid_run_keeps_partial_results(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "5", "--die-after-requests", "12")
    rc, out, err, r = bench(
        s,
        tmp_path,
        "--random-output-len",
        "10",
        "--num-prompts",
        "200",
        "--max-concurrency",
        "4",
        "--no-ready-check",
        "--num-workers",
        "2",
    )
    assert rc == 1
    assert 8 <= r["completed"] < 12
    assert r["failed"] >= 1
    assert r["completed"] + r["failed"] + r["not_sent"] == 200
    assert any("truncated" in k or "connection" in k for k in r["failure_reasons"])
    assert r["not_sent"] > 100  # the run stopped sending once the server was unreachable
    assert any("unreachable" in k for k in r["failure_reasons"])


def test_server_dying_at_concurrency_one_ends_the_run(mock_server, tmp_path):
    """One request at a time: the failure that aborts the run is the last in flight, and the requests left
    pending become not-sent at once; the run must end there (it used to wait forever)."""
    s = mock_server("--token-delay-ms", "2", "--die-after-requests", "3")
    rc, out, err, r = bench(
        s, tmp_path, "--random-output-len", "4", "--num-prompts", "20", "--max-concurrency", "1",
        "--num-workers", "1", "--no-ready-check",
    )  # fmt: skip
    assert rc == 1
    assert r["completed"] == 2 and r["completed"] + r["failed"] + r["not_sent"] == 20
    assert r["not_sent"] >= 1 and any("unreachable" in k for k in r["failure_reasons"])


@pytest.mark.slow  # 1.9 s of CPU a case: a whole bench with its load worker processes
def test_ctrl_c_saves_what_was_measured(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "10")
    cmd = CLI + [
        "--base-url",
        s.url,
        "--model",
        "mock",
        "--random-input-len",
        "8",
        "--random-output-len",
        "20",
        "--num-prompts",
        "5000",
        "--max-concurrency",
        "8",
        "--save-result",
        "--result-dir",
        str(tmp_path),
        "--result-filename",
        "r.json",
        "--num-workers",
        "2",
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # interrupt once the server has seen 40 requests (the ready check and at most 8 in flight among them), so
    # more than 8 have completed however busy the machine is; the deadline only guards against a hang
    deadline = time.monotonic() + 300
    while json.loads(urllib.request.urlopen(s.url + "/stats").read())["requests"] < 40:
        assert p.poll() is None and time.monotonic() < deadline, "the benchmark never got going"
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["interrupted"] is True
    assert r["completed"] > 8
    assert r["completed"] + r["failed"] + r["not_sent"] == 5000


def test_no_usage_falls_back_to_the_tokenizer(mock_server, tmp_path, tiny_tokenizer):
    s = mock_server("--token-delay-ms", "2", "--mode", "no-usage")
    rc, out, err, r = bench(
        s,
        tmp_path,
        "--random-output-len",
        "6",
        "--num-prompts",
        "4",
        "--max-concurrency",
        "2",
        "--tokenizer",
        str(tiny_tokenizer),
        "--save-detailed",
    )
    assert rc == 0, err
    assert r["token_count_source"] == "tokenizer"
    from tokenizers import Tokenizer  # noqa: PLC0415 (optional extra)

    expected = len(Tokenizer.from_file(str(tiny_tokenizer / "tokenizer.json")).encode(" tok" * 6).ids)
    assert r["output_lens"] == [expected] * 4


def test_sweep_writes_one_file_per_point_and_a_table(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "2")
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
        "--num-prompts",
        "6",
        "--max-concurrency",
        "1,3",
        "--save-result",
        "--result-dir",
        str(tmp_path),
    ]
    p = servelab(*cmd)
    assert p.returncode == 0, p.stderr
    files = sorted(f.name for f in tmp_path.glob("*.json"))
    assert len(files) == 2 and "concurrency1" in files[0] and "concurrency3" in files[1]
    assert "servelab bench sweep" in p.stdout


def test_open_loop_follows_the_schedule(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "2")
    rc, out, err, r = bench(
        s,
        tmp_path,
        "--random-output-len",
        "4",
        "--num-prompts",
        "40",
        "--request-rate",
        "40",
        "--burstiness",
        "1",
    )
    assert rc == 0, err
    assert r["request_rate"] == 40.0
    recs = [json.loads(x) for x in Path(r["records_file"]).read_text().splitlines()]
    sched = sorted(rec["sched"] for rec in recs)
    # the schedule, not the wall clock (how late requests leave depends on the machine's load):
    # Poisson gaps rescaled so the last arrival is at n / rate = 1 s, every request sent at its time or after
    assert len(sched) == 40 and sched[-1] == pytest.approx(1.0)
    assert len(set(sched)) == 40 and sched[0] < sched[-1] / 2
    assert all(rec["sent"] >= rec["sched"] - 0.001 for rec in recs)  # the event loop wakes up to 1 ms early
    assert r["duration"] >= sched[-1]


def test_multiturn_conversations_grow(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "2")
    rc, out, err, r = bench(
        s,
        tmp_path,
        "--endpoint",
        "/v1/chat/completions",
        "--dataset-name",
        "multiturn",
        "--multiturn-turns",
        "3",
        "--random-output-len",
        "5",
        "--num-prompts",
        "2",
        "--max-concurrency",
        "2",
    )
    assert rc == 0, err
    assert r["completed"] == 6
    recs = [json.loads(x) for x in Path(r["records_file"]).read_text().splitlines()]
    by_conv = {}
    for x in recs:
        by_conv.setdefault(x["i"] // 1000, []).append(x)
    for turns in by_conv.values():
        turns.sort(key=lambda x: x["i"])
        # each turn starts after the previous one ended; prompts grow (mock counts words of all messages)
        assert [t["i"] % 1000 for t in turns] == [0, 1, 2]
        assert all(b["sent"] >= a["end"] for a, b in pairwise(turns))
        assert turns[0]["in"] < turns[1]["in"] < turns[2]["in"]


def test_bad_input_is_one_line_exit_2(tmp_path):
    # refused before any request: the command in-process (tests/clirun.py)
    p = servelab("bench", "--dataset-name", "bogus", "--model", "m")
    assert p.returncode == 2 and p.stderr.startswith("error: --dataset-name")
    p = servelab("bench", "--max-concurrency", "1,x", "--model", "m")
    assert p.returncode == 2 and "'x'" in p.stderr
    p = servelab("bench", "--goodput", "ttft=5", "--model", "m")
    assert p.returncode == 2 and "goodput" in p.stderr


@pytest.mark.slow  # 0.8 s of CPU a case: a whole bench with its load worker processes
def test_json_puts_the_result_on_stdout_and_the_summary_on_stderr(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "1")
    code, out, err, saved = bench(s, tmp_path, "--num-prompts", "6", "--random-output-len", "4", "--json")
    assert code == 0, err
    printed = json.loads(out)  # one answer (docs/output.md): its schema, and the results in a list
    assert (printed["schema"], printed["schema_version"]) == ("servelab.bench", 1)
    assert list(printed) == ["schema", "schema_version", "results"]
    (result,) = printed["results"]
    assert result["completed"] == 6 == saved["completed"] and result["date"] == saved["date"]
    assert "Serving Benchmark Result" in err or "Successful requests" in err
    code, out, err, _ = bench(s, tmp_path, "--num-prompts", "4", "--max-concurrency", "1,2", "--json")
    assert code == 0, err
    assert [point["completed"] for point in json.loads(out)["results"]] == [4, 4]
