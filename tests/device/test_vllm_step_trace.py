"""The twin's schedule against the steps a real vLLM ran (tests/data/vllm_gpu_steps19: vLLM 0.25.0 on one
H100, the Qwen3-30B-A3B-shaped MoE, `--max-num-batched-tokens 4096 --max-num-seqs 32`, its per-step log on
with `--enable-logging-iteration-details`). Each step vLLM logged names its prompts, their new tokens and its
decodes (v1/engine/core.py log_iteration_details); `servelab bench --simulate` of the same run (the same
prompts, clients and limits) schedules its own steps, recorded here as the lane forms them. Their number and
make-up must agree: what the twin then prices is the engine's schedule, not one of its own."""

import json
import lzma
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import pytest

from servelab.cli.main import app
from servelab.predict.serving import engine

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_gpu_steps19"
SERVER = ["--max-num-batched-tokens", "4096", "--max-num-seqs", "32", "--gpu-memory-utilization", "0.85"]
ITERATION = re.compile(
    r"(\d\d)-(\d\d) (\d\d:\d\d:\d\d) \[core\.py:\d+\] Iteration\(\d+\): (\d+) context requests, "
    r"(\d+) context tokens, (\d+) generation requests, \d+ generation tokens"
)


class Step(NamedTuple):
    prompts: int  # requests whose prompt (a chunk of it) the step carries
    prompt_tokens: int
    decodes: int


def from_run_start(steps: list[Step]) -> list[Step]:
    """The steps from the run's first, which carries several prompts (its clients start together): before it
    the ready check's lone prompt and its decodes (`servelab bench` sends it in the run's first second)."""
    return steps[next(i for i, s in enumerate(steps) if s.prompts >= 2) :]


def vllm_steps(measured: dict) -> list[Step]:
    """The steps vLLM logged between the run's start and end (the log's times are whole UTC seconds)."""
    start, end = int(measured["benchmark_start_time_unix"]), int(measured["benchmark_end_time_unix"])
    year = datetime.fromtimestamp(start, UTC).year
    steps = []
    with lzma.open(DATA / "server.log.xz", "rt") as log:
        for line in log:
            if found := ITERATION.search(line):
                month, day, clock, prompts, tokens, decodes = found.groups()
                when = datetime.strptime(f"{year}-{month}-{day} {clock}", "%Y-%m-%d %H:%M:%S").replace(
                    tzinfo=UTC
                )
                if start <= when.timestamp() <= end:
                    steps.append(Step(int(prompts), int(tokens), int(decodes)))
    return from_run_start(steps)


def twin_steps(measured: dict, monkeypatch, tmp_path: Path) -> list[Step]:
    """`servelab bench --simulate` of the run, as accuracy/twin_vs_vllm_gpu.py replays it, with each batch the
    first lane schedules recorded (a decode stretch stands for `steps` identical steps)."""
    lanes: dict[int, list[Step]] = {}
    schedule = engine.Lane.schedule

    def recording(lane, *args, **kwargs):
        batch = schedule(lane, *args, **kwargs)
        if batch is not None:
            step = Step(len(batch.chunks), sum(new for _, new, _ in batch.chunks), batch.decodes)
            lanes.setdefault(id(lane), []).extend([step] * batch.steps)
        return batch

    monkeypatch.setattr(engine.Lane, "schedule", recording)
    cfg = measured["config"]
    app(
        ["bench", "--simulate", "--system", "h100_sxm", "--engine", "vllm", "--model", "Qwen/Qwen3-30B-A3B"]
        + ["--dataset-name", "random", "--no-live", "--random-input-len", str(cfg["random_input_len"])]
        + ["--random-output-len", str(cfg["random_output_len"]), "--random-range-ratio", "0.8"]
        + ["--random-range-rule", "inferencex", "--max-concurrency", str(cfg["max_concurrency"])]
        + ["--num-prompts", str(cfg["num_prompts"]), "--seed", str(cfg["seed"]), *SERVER]
        + [
            "--num-workers",
            str(measured["client"]["num_workers"]),
            "--ready-check",
            "--enable-prefix-caching",
        ]
        + ["--save-result", "--result-dir", str(tmp_path), "--result-filename", "twin.json"],
        standalone_mode=False,
    )
    return from_run_start(next(iter(lanes.values())))


def summary(steps: list[Step]) -> dict[str, float]:
    carrying = [s for s in steps if s.prompts]
    return {
        "steps": len(steps),
        "prompt steps": len(carrying),
        "tokens a prompt step": sum(s.prompt_tokens for s in carrying) / len(carrying),
        "share at 28+ decodes": sum(s.decodes >= 28 for s in steps) / len(steps),
        "share at 12+ decodes": sum(s.decodes >= 12 for s in steps) / len(steps),
    }


@pytest.mark.parametrize("run", ["e_c80", "f_c16"])
def test_the_twin_schedules_the_steps_vllm_ran(run, monkeypatch, tmp_path):
    """e: 80 clients of 410-512-token prompts on 32 sequences, a new prompt beside the decodes every few
    steps; f: 16 clients of 1,639-2,048-token prompts, one prompt a step at most. vLLM ran 1,499 and 1,434
    steps; the twin's within 2 %, the prompt-carrying ones within 6 %, their tokens within 6 % and the
    batches' sizes in the same shares within 4 points (a step or two of each side's arrival order; the
    bounds are what one run of each can show)."""
    measured = json.loads((DATA / f"{run}.json").read_text())
    vllm = summary(vllm_steps(measured))
    twin = summary(twin_steps(measured, monkeypatch, tmp_path))
    assert vllm["steps"] > 1000 and vllm["prompt steps"] > 50  # the log covered the run
    assert twin["steps"] == pytest.approx(vllm["steps"], rel=0.02)
    assert twin["prompt steps"] == pytest.approx(vllm["prompt steps"], rel=0.06)
    assert twin["tokens a prompt step"] == pytest.approx(vllm["tokens a prompt step"], rel=0.06)
    for share in ("share at 28+ decodes", "share at 12+ decodes"):
        assert twin[share] == pytest.approx(vllm[share], abs=0.04), share
