"""A sweep job's benchmark point is what InferenceX's launch script asks of its client, job for job.

The upstream side is the capture of the pinned scripts (tests/data/inferencex/launch/launches.json.gz):
for every single-node fixed-seq-len job, the arguments its script gave `run_benchmark_serving`
(benchmarks/benchmark_lib.sh), which adds fixed options of its own (servelab.recipes.ix_client.FIXED) and
leaves the rest at its client's defaults. Each is compared with the job servelab's sweep makes of the same
row, read as the load generator's config (BenchConfig).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from pinned import pinned_jobs

from servelab.engines import argv as argvlib
from servelab.recipes.ix_client import (
    PER_JOB,
    PER_SCRIPT,
    RUN_SUPPLIED,
    SWITCHES,
    client_options,
    unknown_options,
)

IX = Path(__file__).resolve().parents[1] / "data" / "inferencex"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "recipes.md"
# a script that passes run_benchmark_serving a stray word: upstream's wrapper stops on it
STRAY = "single_node/fixed_seq_len/qwen3.5_fp8_mi325x_mtp.sh"


@pytest.fixture(scope="module")
def capture() -> list[dict]:
    with gzip.open(IX / "launch" / "launches.json.gz", "rt") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def jobs_by_row():
    out = {}
    for job in pinned_jobs():
        r = job.row
        if job.scenario == "fixed-seq-len" and not r.get("prefill"):
            key = (job.key, r["isl"], r["osl"], r["tp"], r["ep"], r["dp-attn"], r["spec-decoding"], r["conc"])
            out[key] = job
    return out


def upstream_call(args: list[str]) -> dict[str, str | None]:
    """run_benchmark_serving's flags -> value (None for a switch)."""
    return argvlib.flag_values(argvlib.parse(args, switches=SWITCHES))


def test_every_job_benches_as_upstreams_script_asks(capture, jobs_by_row):
    compared = 0
    for record in capture:
        row = (record["key"], record["isl"], record["osl"], record["tp"], record["ep"], record["dp-attn"])
        job = jobs_by_row[(*row, record["spec-decoding"], record["conc"])]
        assert len(job.benches) == 1
        cfg = job.benches[0].config()
        call = upstream_call(record["bench"])
        conc = int(call["--max-concurrency"])
        want = {
            # the job's own values, as the script computes them
            "model": call["--model"],
            "random_input_len": int(call["--input-len"]),
            "random_output_len": int(call["--output-len"]),
            "random_range_ratio": float(call["--random-range-ratio"]),
            "num_prompts": int(call["--num-prompts"]),
            "max_concurrency": conc,
            # what the script chooses
            "backend": call["--backend"],
            "endpoint": call.get("--endpoint", "/v1/completions"),
            "use_chat_template": "--use-chat-template" in call or "--dsv4" in call,
            "dsv4": "--dsv4" in call,
            "trust_remote_code": "--trust-remote-code" in call,
            "tokenizer_mode": call.get("--tokenizer-mode", "auto"),
            # what run_benchmark_serving always adds
            "dataset_name": "random",
            "request_rate": float("inf"),
            "ignore_eos": True,
            "num_warmups": 2 * conc,
            "percentile_metrics": ["ttft", "tpot", "itl", "e2el"],
            # its client's defaults for what it leaves out
            "metric_percentiles": [90.0, 99.0, 99.9],
            "random_range_rule": "inferencex",  # [int(L r), L]
            "random_prefix_len": 0,
            "burstiness": 1.0,
            "seed": 0,
            "temperature": 0.0,
            "stream": True,
        }
        got = {name: getattr(cfg, name) for name in want}
        assert got == want, record["id"]
        compared += 1
    assert len(capture) == 690
    assert compared == 690  # InferenceX's atom keys (110 jobs) included


def test_every_option_upstream_passes_is_known_and_documented(capture):
    passed = {a.name for r in capture for a in argvlib.parse(r["bench"], switches=SWITCHES) if a.name}
    known = set(PER_SCRIPT) | set(PER_JOB) | set(RUN_SUPPLIED)
    assert passed <= known
    table = DOCS.read_text().split("### InferenceX's benchmark client", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    for flag in sorted(known):  # each in the first column of the docs table, alone or with its value
        assert any(re.search(rf"`{flag}[` ]", row.split(" | ")[0]) for row in rows), flag


def test_a_stray_word_upstreams_wrapper_refuses_is_found(capture):
    stray = {r["script"] for r in capture if unknown_options(r["bench"])}
    assert stray == {STRAY}
    record = next(r for r in capture if r["script"] == STRAY)
    assert unknown_options(record["bench"]) == ["EP_SIZE"]
    assert client_options(record["bench"]) == {"backend": "vllm", "use-chat-template": True}
