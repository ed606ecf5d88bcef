"""Whole `servelab bench` runs (in the test's process, tests/clirun.py; the load worker a process) against a
misbehaving server (hostile_server.py): every fault is a counted failure with its reason, the run goes on and
saves its result, and nothing raises."""

import json
import subprocess
from pathlib import Path

import pytest
from clirun import servelab


def bench(url: str, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    cmd = [
        "bench",
        "--base-url",
        url,
        "--model",
        "hostile",
        "--random-input-len",
        "8",
        "--random-output-len",
        "8",
        "--num-prompts",
        "4",
        "--max-concurrency",
        "2",
        "--num-workers",
        "1",
        "--no-ready-check",
        "--save-result",
        "--result-dir",
        str(tmp_path),
        "--result-filename",
        "r.json",
        *args,
    ]
    p = servelab(*cmd)
    path = tmp_path / "r.json"
    return p, json.loads(path.read_text()) if path.exists() else None


def test_crlf_stream_with_comments_and_event_fields_succeeds(hostile_server, tmp_path):
    p, r = bench(hostile_server("crlf").url, tmp_path)
    assert p.returncode == 0, p.stderr
    assert r["completed"] == 4 and r["failed"] == 0 and r["total_output_tokens"] == 32


def test_slow_stream_succeeds(hostile_server, tmp_path):
    p, r = bench(hostile_server("slow").url, tmp_path)
    assert p.returncode == 0, p.stderr
    assert r["completed"] == 4 and r["mean_ttft_ms"] >= 150


@pytest.mark.slow  # 1.7 s of CPU a case: a whole bench with its load worker processes
@pytest.mark.parametrize(
    "mode,reason,args",
    [
        ("cut", "truncated stream", ()),
        ("endless", "response larger than 1 MiB", ("--max-response-mib", "1")),
        ("bad-length", "malformed HTTP header Content-Length", ()),
        ("reset", "connection error", ()),
        ("die", "truncated stream", ()),
    ],
)
def test_faults_are_failed_requests_and_the_run_goes_on(hostile_server, tmp_path, mode, reason, args):
    p, r = bench(hostile_server(mode).url, tmp_path, *args)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    assert r["completed"] == 0 and r["failed"] == 4
    assert [k for k in r["failure_reasons"] if not k.startswith(reason)] == []
