"""`servelab bench --trace` against real vLLM on the CPU with prefix caching on: the pinned InferenceX-format
sample's sessions, whose turns repeat their history, hit vLLM's prefix cache, and the hit rate the result
reports is what vLLM's own counters grew by over the run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.bench.agentic.trace import read_trace_file
from servelab.runner.server_metrics import metric_sums

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SAMPLE = Path(__file__).resolve().parents[1] / "data" / "inferencex" / "agentic" / "traces.jsonl"


def test_multi_turn_sessions_hit_the_prefix_cache(vllm_server, tiny_llama, tmp_path):
    server = vllm_server  # the shared one, prefix caching on (tests/e2e/conftest.py)
    cmd = [
        sys.executable,
        "-m",
        "servelab.cli.main",
        "bench",
        "--base-url",
        server.url,
        "--model",
        server.model,
    ]
    cmd += ["--endpoint", "/v1/chat/completions", "--trace", str(SAMPLE), "--trace-max-gap", "0.2"]
    cmd += ["--save-result", "--result-dir", str(tmp_path), "--result-filename", "r.json"]
    before = metric_sums(server.url)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    after = metric_sums(server.url)
    r = json.loads((tmp_path / "r.json").read_text())
    planned = read_trace_file(str(SAMPLE)).num_requests
    assert r["completed"] == planned and r["failed"] == 0 and r["not_sent"] == 0
    assert r["agentic"]["sessions"]["completed"] == 2
    cache = r["agentic"]["prefix_cache"]["server"]
    assert cache["engine"] == "vllm"
    # vLLM looked every measured prompt token up in its cache and found part of them: the history
    assert cache["queries"] >= r["total_input_tokens"] > 0
    assert 0 < cache["hits"] < cache["queries"] and cache["hit_rate"] > 0.3
    # the run's share of what vLLM counted (its total also holds the ready check, sent before the run)
    served_hits = after["vllm:prefix_cache_hits_total"] - before.get("vllm:prefix_cache_hits_total", 0.0)
    assert 0 < cache["hits"] <= served_hits
    assert r["agentic"]["per_turn"][1]["theoretical_hit_rate"] > 0.5
