"""Each step's period in a real vLLM against the twin's price of the same kind of step (issue 30).

A server started with ITERATION_LOG=1 LOG_TIMES=1 (scripts/device_vllm/start.sh) logs one `Iteration` line a
step, stamped to the microsecond when the engine core has the step's result (v1/engine/core.py
log_iteration_details, vLLM 0.25.0). While the engine is busy, the time from one such line to the next is a
step's period: what a decoding request waits between tokens. `servelab bench --simulate` of the same run (the
same prompts, clients and limits, as accuracy/twin_vs_vllm_gpu.py replays it) records each step it schedules
with its price. Both sides' steps are put in the same classes (decode-only by batch; carrying a prompt by
its tokens) and their median periods compared.

    PYTHONPATH=src python accuracy/vllm_step_periods.py tests/data/vllm_gpu_graphs20 \
        --server-args "--max-num-batched-tokens 4096 --max-num-seqs 32 --gpu-memory-utilization 0.85"

A step that follows an idle engine (one client between its requests, the period longer than IDLE_S) has no
period: its start is not logged. The first step of each run is dropped for the same reason.
"""

import argparse
import contextlib
import io
import json
import lzma
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import twin_vs_vllm_gpu
from register_vllm_gpu import LIMITS

from servelab.cli.main import app
from servelab.predict.serving import engine

ITERATION = re.compile(
    r"(\d{9,11}\.\d{6}) INFO \[core\.py:\d+\] Iteration\(\d+\): (\d+) context requests, "
    r"(\d+) context tokens, (\d+) generation requests"
)
IDLE_S = 0.5  # no step of these runs takes half a second; a longer gap is the engine waiting for work


class Step(NamedTuple):
    prompts: int
    prompt_tokens: int
    decodes: int
    period_ms: float


def logged_steps(log: Path) -> list[tuple[float, int, int, int]]:
    """(time, prompts, prompt tokens, decodes) of every step the log stamps, in order."""
    opener = lzma.open if log.suffix == ".xz" else open
    with opener(log, "rt") as lines:
        found = (ITERATION.search(line) for line in lines)
        return [(float(m[1]), int(m[2]), int(m[3]), int(m[4])) for m in found if m]


def vllm_steps(logged: list[tuple[float, int, int, int]], measured: dict) -> list[Step]:
    """The run's steps with a period: logged inside its window, after a step of the same run, not idle."""
    start, end = measured["benchmark_start_time_unix"], measured["benchmark_end_time_unix"]
    inside = [s for s in logged if start <= s[0] <= end]
    steps = []
    for before, (when, prompts, tokens, decodes) in zip(inside, inside[1:], strict=False):
        period = when - before[0]
        if period <= IDLE_S:
            steps.append(Step(prompts, tokens, decodes, period * 1000))
    return steps


def twin_steps(measured: dict, limits: dict, model: str, system: str) -> list[Step]:
    """The twin's steps for the run, each with its price (a decode stretch stands for `steps` steps)."""
    recorded: dict[int, list[Step]] = {}
    schedule = engine.Lane.schedule

    def recording(lane, *args, **kwargs):
        batch = schedule(lane, *args, **kwargs)
        if batch is not None:
            tokens = sum(new for _, new, _ in batch.chunks)
            step = Step(len(batch.chunks), tokens, batch.decodes, batch.duration[0] / batch.steps * 1000)
            recorded.setdefault(id(lane), []).extend([step] * batch.steps)
        return batch

    engine.Lane.schedule = recording
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "twin.json"
            with contextlib.redirect_stdout(io.StringIO()):  # the simulation's own report
                app(
                    twin_vs_vllm_gpu.simulate_argv(measured, system, limits, out, model),
                    standalone_mode=False,
                )
    finally:
        engine.Lane.schedule = schedule
    return next(iter(recorded.values()), [])


def step_class(step: Step) -> str:
    if not step.prompts:
        low = (step.decodes - 1) // 8 * 8 + 1
        return f"decode {low:>4}-{low + 7:<5}"
    low = (step.prompt_tokens - 1) // 256 * 256 + 1
    return f"prompt {low:>5}-{low + 255:<6}"


def compare(measured_steps: list[Step], twin: list[Step]) -> list[str]:
    by_class: dict[str, tuple[list[float], list[float]]] = {}
    for side, steps in enumerate((measured_steps, twin)):
        for step in steps:
            by_class.setdefault(step_class(step), ([], []))[side].append(step.period_ms)
    lines = []
    for name in sorted(by_class, key=lambda n: (n.split()[0], int(n.split()[1].split("-")[0]))):
        vllm, ours = by_class[name]
        if len(vllm) < 3 or not ours:
            continue
        m, t = statistics.median(vllm), statistics.median(ours)
        lines.append(f"  {name}  {len(vllm):5d} / {len(ours):5d}  {m:8.2f} / {t:8.2f}  {t / m:5.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="results (*_cN.json) and server.log[.xz] of one server")
    ap.add_argument("--system", default="h100_sxm")
    ap.add_argument("--model", default="Qwen/Qwen3-30B-A3B")
    ap.add_argument("--server-args", type=twin_vs_vllm_gpu.parse_server_args, default={})
    ap.add_argument("--log", type=Path, help="the server's log (default: FOLDER/server.log[.xz])")
    args = ap.parse_args(argv)
    log = args.log or next(
        (p for p in (args.folder / "server.log.xz", args.folder / "server.log") if p.exists()), None
    )
    if log is None or not log.exists():
        print(
            f"error: {args.folder}: expected server.log or server.log.xz (the --log option names another)",
            file=sys.stderr,
        )
        return 2
    logged = logged_steps(log)
    if not logged:
        print(
            f"error: {log}: no microsecond-stamped Iteration lines"
            " (start the server with LOG_TIMES=1 ITERATION_LOG=1)",
            file=sys.stderr,
        )
        return 2
    limits = {**LIMITS, **args.server_args}
    print("step class          steps vLLM / twin   median period, ms, vLLM / twin  ratio")
    for path in sorted(args.folder.glob("*_c*.json")):
        if path.name.startswith("metrics"):
            continue
        measured = json.loads(path.read_text())
        steps = vllm_steps(logged, measured)
        if not steps:
            print(f"{path.stem}: no logged step inside the run's window")
            continue
        print(f"{path.stem}: {len(steps)} steps with a period")
        for line in compare(steps, twin_steps(measured, limits, args.model, args.system)):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
