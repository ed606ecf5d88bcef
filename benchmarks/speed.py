"""servelab's own speed claims, measured in one run and printed as a ratio against each target.

    python benchmarks/speed.py [--repeats 5]

Targets (the design's): a thousand simulated requests in a few milliseconds (target 10 ms), a perf-table
lookup in under 20 us, a whole default plan in about a second; the issue "fast at every size": `servelab
--version` and `--help` in under 0.1 s as fresh processes, `servelab plan` as a fresh process in under 0.5 s
for DeepSeek-V3 on 8 H200s and under 1 s for the default question and up to 72 GPUs (DeepSeek-V4-Pro on 72
GB200s, aggregated and disaggregated). Run it on a quiet machine: these are wall-clock figures, which is why
they live here and not in the tests; the plan rows also print the process's CPU time (user + system), which
other work on the machine moves less.
"""

import argparse
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from servelab.perfdb import keys
from servelab.perfdb.db import perfdb_for
from servelab.predict.engines import engine_profile
from servelab.predict.plan import PlanRequest, make_plan
from servelab.predict.serving import StepPricer, Workload, simulate
from servelab.predict.static import prepare
from servelab.specs import Parallel, load_model, load_system

SIM_TARGET_MS = 10.0
LOOKUP_TARGET_US = 20.0
PLAN_TARGET_S = 1.0
CLI_START_TARGET_S = 0.1
# `servelab plan` questions timed as fresh processes: (row, arguments, target in s)
PLAN_QUESTIONS = (
    (
        "plan DeepSeek-V3 8x H200 (s)",
        "deepseek-v3 --system h200_sxm --gpus 8 --isl 4000 --osl 1000 --tpot-ms 30",
        0.5,
    ),
    ("plan default (s)", "", 1.0),
    ("plan V4-Pro 72x GB200 agg (s)", "deepseek-v4-pro --system gb200 --gpus 72 --mode agg", 1.0),
    ("plan V4-Pro 72x GB200 disagg (s)", "deepseek-v4-pro --system gb200 --gpus 72 --mode disagg", 1.0),
)


def best_of(repeats: int, fn) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def simulate_thousand(repeats: int) -> float:
    system, model, parallel = load_system("h200_sxm"), load_model("qwen3-32b"), Parallel(tp=2)
    engine = engine_profile("vllm")
    mem = prepare(model, system, parallel, engine.max_num_batched_tokens)
    pricer = StepPricer(model, parallel, engine, perfdb_for(system))
    workload = Workload(isl=1000, osl=200, concurrency=64, num_requests=1000)
    simulate(model, parallel, engine, mem, workload, pricer)  # prices the step shapes once
    return best_of(repeats, lambda: simulate(model, parallel, engine, mem, workload, pricer)) * 1e3


def lookup_us(repeats: int) -> float:
    """A lookup of a key not asked before: the tables keep their answers, so each pass asks new keys."""
    tables = perfdb_for(
        load_system("h200_sxm")
    ).tables  # the shipped tables, without the PerfDB's answer cache
    if tables is None:
        raise SystemExit("no perf tables for h200_sxm")
    rng = random.Random(1)

    def new_queries() -> list[keys.OpKey]:
        queries: list[keys.OpKey] = [
            keys.Gemm(rng.randint(1, 30000), rng.choice([4096, 8192, 5000]), 4096) for _ in range(3000)
        ]
        queries += [
            keys.AttentionDecode(rng.randint(1, 256), rng.randint(64, 40000), 32, 8, 128) for _ in range(3000)
        ]
        return queries

    for query in new_queries()[:50]:
        tables.lookup(query)  # builds the interpolation groups once
    best = float("inf")
    for _ in range(repeats):
        queries = new_queries()
        t = time.perf_counter()
        for query in queries:
            tables.lookup(query)
        best = min(best, (time.perf_counter() - t) / len(queries))
    return best * 1e6


def plan_s(repeats: int) -> float:
    make_plan(PlanRequest())  # warm imports and tables
    return best_of(repeats, lambda: make_plan(PlanRequest()))


def servelab_argv() -> list[str]:
    """The console script beside this python, else -m."""
    script = shutil.which("servelab", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "servelab.cli.main"]


def cli_start_s(repeats: int, *args: str) -> float:
    """Wall time of `servelab ARGS` as a fresh process."""
    argv = servelab_argv() + list(args)
    return best_of(repeats, lambda: subprocess.run(argv, capture_output=True, check=True))


def fresh_plan_s(repeats: int, question: str) -> tuple[float, float]:
    """Best wall time and best CPU time (user + system) of `servelab plan QUESTION --json` as a fresh process;
    one run first, which caches the perf tables it reads (as any earlier run on the machine has)."""
    argv = [*servelab_argv(), "plan", *question.split(), "--json"]
    subprocess.run(argv, capture_output=True, check=True)
    wall = cpu = float("inf")
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        wall = min(wall, time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = min(cpu, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = [
        ("simulate 1,000 requests (ms)", simulate_thousand(args.repeats), SIM_TARGET_MS),
        ("perf-table lookup (us)", lookup_us(args.repeats), LOOKUP_TARGET_US),
        ("default plan, in-process (s)", plan_s(max(1, args.repeats // 2)), PLAN_TARGET_S),
        ("servelab --version (s)", cli_start_s(args.repeats, "--version"), CLI_START_TARGET_S),
        ("servelab --help (s)", cli_start_s(args.repeats, "--help"), CLI_START_TARGET_S),
    ]
    for name, value, target in rows:
        print(f"{name:32s} {value:10.3f}   target {target:g}   ratio {value / target:.2f}")
    for name, question, target in PLAN_QUESTIONS:
        wall, cpu = fresh_plan_s(max(1, args.repeats // 2 + 1), question)
        print(f"{name:32s} {wall:10.3f}   target {target:g}   ratio {wall / target:.2f}   cpu {cpu:.3f} s")


if __name__ == "__main__":
    main()
