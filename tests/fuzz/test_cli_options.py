"""Every numeric option of every command with negative, zero, huge, non-numeric, NaN and infinite values:
each value the option cannot take ends in exit 2 and a message naming the option, never a traceback.

A value an option can take (`--seed 0`, `--ttft-ms inf`: no limit) is not a hostile input and is left out,
as are values that would start a long valid run.
"""

from __future__ import annotations

import pytest
from fuzzkit import hostile, pending

VALUES = {"neg": "-5", "zero": "0", "huge": "99999999999999999999", "text": "abc", "nan": "nan", "inf": "inf"}
ALL = tuple(VALUES)
NOT_FLOAT = ("text", "nan")  # a float option that takes 0, any size and inf (a limit that is no limit)


DEPLOY = ("llama-3.1-8b",)
BENCH = ("bench", "--base-url", "http://127.0.0.1:9", "--num-prompts", "2", "--no-ready-check")
GEMM = ("db", "query", "gemm", "--m", "16", "--n", "4096", "--k", "4096")
DECODE = ("db", "query", "attention_decode", "--batch", "8", "--kv-len", "100", "--heads", "32")
DECODE += ("--kv-heads", "8", "--head-dim", "128")
MOE = ("db", "query", "moe", "--tokens", "16", "--hidden", "4096", "--inter", "1024", "--experts", "8")
MOE += ("--topk", "2", "--ep", "1")
RENDER = ("recipes", "render", "dsv4-fp4-b200-vllm")
COLLECT_DRY = ("collect", "--dry-run", "--ops", "gemm", "--smoke")
RUN = ("run", "dsv4-fp4-b200-vllm", "--arm", "tp8-ep1", "--seq-len", "8k1k", "--dry-run")

# (command, option, the kinds of VALUES it must refuse, {kind: xfail reason} for those refused elsewhere)
TABLE: list[tuple[tuple[str, ...], str, tuple[str, ...], dict[str, str]]] = [
    (("memory", *DEPLOY), "--tp", ALL, {}),
    (("memory", *DEPLOY), "--ep", ALL, {}),
    (("memory", *DEPLOY), "--pp", ALL, {}),
    (("memory", *DEPLOY), "--context", ALL, {}),
    (("memory", *DEPLOY), "--max-num-batched-tokens", ALL, {}),
    (("memory", *DEPLOY), "--gpu-memory-utilization", ALL, {}),
    (("estimate", *DEPLOY), "--tp", ALL, {}),
    (("estimate", *DEPLOY), "--ep", ALL, {}),
    (("estimate", *DEPLOY), "--pp", ALL, {}),
    (("estimate", *DEPLOY), "--batch", ALL, {}),
    (("estimate", *DEPLOY), "--isl", ALL, {}),
    (("estimate", *DEPLOY), "--osl", ALL, {}),
    (("plan", *DEPLOY), "--gpus", ALL, {}),
    (("plan", *DEPLOY), "--isl", ALL, {}),
    (("plan", *DEPLOY), "--osl", ALL, {}),
    (("plan", *DEPLOY), "--ttft-ms", ("neg", "zero", *NOT_FLOAT), {}),
    (("plan", *DEPLOY), "--tpot-ms", ("neg", "zero", *NOT_FLOAT), {}),
    (("plan", *DEPLOY), "--e2e-ms", ("neg", "zero", *NOT_FLOAT), {}),
    (("plan", *DEPLOY), "--request-rate", ("neg", "zero", *NOT_FLOAT), {}),
    (("plan", *DEPLOY), "--top", ("neg", "zero", "text", "nan", "inf"), {}),
    (("plan", *DEPLOY), "--prefix-hit-rate", ("neg", "huge", "text", "nan", "inf"), {}),
    (("plan", *DEPLOY), "--spec-tokens", ("neg", "huge", "text", "nan", "inf"), {}),
    (("plan", *DEPLOY), "--acceptance", ("neg", "huge", "text", "nan", "inf"), {}),
    (("plan", *DEPLOY), "--max-num-batched-tokens", ALL, {}),
    (("plan", *DEPLOY), "--max-num-seqs", ("neg", "zero", "text", "nan", "inf"), {}),
    (("plan", *DEPLOY), "--explain", ("neg", "zero", "text", "nan", "inf"), {}),
    (("plan", *DEPLOY), "--save-top", ("neg", "zero", "text", "nan", "inf"), {}),
    (GEMM, "--m", ALL, {}),
    (GEMM, "--n", ALL, {}),
    (GEMM, "--k", ALL, {}),
    (GEMM, "--batch", ("neg", "text", "nan", "inf"), {}),
    (DECODE, "--kv-len", ALL, {}),
    (DECODE, "--heads", ALL, {}),
    (DECODE, "--head-dim", ALL, {}),
    (MOE, "--topk", ALL, {}),
    (MOE, "--experts", ALL, {}),
    (MOE, "--tokens", ALL, {}),
    (BENCH, "--port", ALL, {}),
    (BENCH, "--random-input-len", ALL, {}),
    (BENCH, "--random-output-len", ALL, {}),
    (BENCH, "--random-range-ratio", ("neg", "huge", "text", "nan", "inf"), {}),
    (BENCH, "--random-prefix-len", ("neg", "huge", "text", "nan", "inf"), {}),
    (BENCH, "--num-prompts", ALL, {}),
    (BENCH, "--max-seconds", ("neg", "zero", *NOT_FLOAT), {}),
    (BENCH, "--max-concurrency", ALL, {}),
    (BENCH, "--request-rate", ("neg", "zero", *NOT_FLOAT), {}),
    (BENCH, "--sweep-rates", ALL, {}),
    (BENCH, "--burstiness", ("neg", "zero", *NOT_FLOAT), {}),
    (BENCH, "--ramp-up-start-rps", ("neg", "zero", *NOT_FLOAT), {}),
    (BENCH, "--temperature", ("neg", "text", "nan", "inf"), {}),
    (BENCH, "--top-p", ("neg", "zero", "huge", "text", "nan", "inf"), {}),
    (BENCH, "--top-k", ("neg", "huge", "text", "nan", "inf"), {}),
    (BENCH, "--num-warmups", ("neg", "huge", "text", "nan", "inf"), {}),
    (BENCH, "--seed", ("neg", "text", "nan", "inf"), {}),
    (BENCH, "--request-timeout", ("neg", "zero", *NOT_FLOAT), {}),
    (BENCH, "--max-response-mib", ("neg", "zero", "huge", *NOT_FLOAT, "inf"), {}),
    (BENCH, "--num-workers", ("neg", "huge", "text", "nan", "inf"), {}),
    (BENCH, "--multiturn-turns", ALL, {}),
    (BENCH, "--custom-output-len", ALL, {}),
    (RENDER, "--tp", ALL, {}),
    (RENDER, "--ep", ALL, {}),
    (RENDER, "--pp", ALL, {}),
    (RENDER, "--isl", ALL, {}),
    (RENDER, "--osl", ALL, {}),
    (RENDER, "--port", ALL, {}),
    (
        ("sweep",),
        "--min-conc",
        ("neg", "zero", "text", "nan", "inf"),
        {},
    ),
    (
        ("sweep",),
        "--max-conc",
        ("neg", "zero", "text", "nan", "inf"),
        {},
    ),
    (("sweep",), "--max-tp", ("neg", "zero", "text", "nan", "inf"), {}),
    (("sweep",), "--max-ep", ("neg", "zero", "text", "nan", "inf"), {}),
    (("sweep",), "--step-size", ALL, {}),
    (
        ("results", "list"),
        "--limit",
        ("neg", "huge", "text", "nan", "inf"),
        {},
    ),
    (COLLECT_DRY, "--gpus", ("neg", "huge", "text", "nan", "inf"), {}),
    (
        COLLECT_DRY,
        "--max-minutes",
        ("neg", "zero", *NOT_FLOAT),
        {},
    ),
    (COLLECT_DRY, "--limit", ("neg", "zero", "text", "nan", "inf"), {}),
    (COLLECT_DRY, "--sample", ("neg", "zero", "text", "nan", "inf"), {}),
    (("calibrate", "engines", "--dry-run"), "--iters", ALL, {}),
    (
        ("calibrate", "engines", "--dry-run"),
        "--prompts-per-concurrency",
        ("neg", "huge", "text", "nan", "inf"),
        {},
    ),
    (("calibrate", "engines", "--dry-run"), "--length-spread", ("neg", "huge", "text", "nan", "inf"), {}),
    (("calibrate", "engines", "--dry-run"), "--jobs", ("neg", "text", "nan", "inf"), {}),
    (RUN, "--conc", ALL, {}),
    ((*RUN, "--conc", "4"), "--repetitions", ALL, {}),
    ((*RUN, "--conc", "4"), "--port", ALL, {}),
    ((*RUN, "--conc", "4"), "--server-timeout", ("neg", "zero", *NOT_FLOAT), {}),
    ((*RUN, "--conc", "4"), "--job-index", ("neg", "text", "nan", "inf"), {}),
]


def cases():
    """Every option with every kind of value for CI; the quick tier keeps each option once, with a kind
    turning from row to row (the diagonal of tests/quick_diagonal.py)."""
    for row, (command, option, kinds, elsewhere) in enumerate(TABLE):
        for kind in kinds:
            marks = [pending(elsewhere[kind])] if kind in elsewhere else []
            if kind != kinds[row % len(kinds)]:
                marks.append(pytest.mark.slow)
            yield pytest.param(command, option, VALUES[kind], id=f"{command[0]}{option}={kind}", marks=marks)


@pytest.mark.parametrize(("command", "option", "value"), list(cases()))
def test_numeric_option_refused(command, option, value, tmp_path):
    r = hostile(*command, option, value, cwd=tmp_path, env={"HOME": str(tmp_path)})
    if value == VALUES["huge"]:
        return  # a value too large may be refused by what it leads to (a model that does not fit)
    stem = option.lstrip("-")
    assert stem in r.err.replace("_", "-") or option in r.err, f"the error does not name {option}: {r.err}"
