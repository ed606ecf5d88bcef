"""servelab's own speed claims, measured in one run and printed as a ratio against each target.

    python benchmarks/speed.py [--repeats 5] [--bench-prompts 300000] [--only-run]

Targets (the design's): a thousand simulated requests in a few milliseconds (target 10 ms), a perf-table
lookup in under 20 us, a whole default plan in about a second; the issue "fast at every size": `servelab
--version` and `--help` in under 0.1 s as fresh processes, `servelab plan` as a fresh process in under 0.5 s
for DeepSeek-V3 on 8 H200s and under 1 s for the default question and up to 72 GPUs (DeepSeek-V4-Pro on 72
GB200s, aggregated and disaggregated), and a 300,000-request `servelab bench` against the mock server under
300 MB in all its processes together (--bench-prompts N for a quicker check, 0 to skip it; it takes a minute
or two), and a `servelab run` of 6 short benches against the mock server costing what its benches' requests
cost (its wall time against the sum of the benches' own durations; --only-run for this row alone). Run it
on a quiet machine: these are wall-clock figures, which is why they live here and not in the tests; the plan
rows also print the process's CPU time (user + system), which other work on the machine moves less, each
question cold (no prices kept by an earlier run) and warm (servelab.perfdb.price_cache's prices kept).
"""

import argparse
import contextlib
import json
import os
import random
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from servelab.cachedir import ENV_DIR
from servelab.perfdb import keys, price_cache
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
BENCH_MEMORY_TARGET_MB = 300.0
MOCK_PORT = 18655
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
    with price_cache_off():  # a simulation run, not one read back from servelab.predict.serving.kept
        return _simulate_thousand(repeats)


def _simulate_thousand(repeats: int) -> float:
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
    """The search itself: nothing read back from the prices and simulations an earlier run kept (those are
    the fresh-process rows' warm figures)."""
    with price_cache_off():
        make_plan(PlanRequest())  # warm imports and tables
        return best_of(repeats, lambda: make_plan(PlanRequest()))


@contextlib.contextmanager
def price_cache_off():
    before = os.environ.get(price_cache.ENV_SWITCH)
    os.environ[price_cache.ENV_SWITCH] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ[price_cache.ENV_SWITCH]
        else:
            os.environ[price_cache.ENV_SWITCH] = before


def servelab_argv() -> list[str]:
    """The console script beside this python, else -m."""
    script = shutil.which("servelab", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "servelab.cli.main"]


def cli_start_s(repeats: int, *args: str) -> float:
    """Wall time of `servelab ARGS` as a fresh process."""
    argv = servelab_argv() + list(args)
    return best_of(repeats, lambda: subprocess.run(argv, capture_output=True, check=True))


def fresh_plan_s(repeats: int, question: str) -> dict[str, tuple[float, float]]:
    """Best wall time and best CPU time (user + system) of `servelab plan QUESTION --json` as a fresh process,
    warm (with the prices an earlier run kept: servelab.perfdb.price_cache) and cold (none kept: their
    directory emptied before the run; the run keeps them, which it pays for), alternated. In a cache directory
    of its own, after one run that caches the perf tables it reads (as any earlier run on the machine has)."""
    argv = [*servelab_argv(), "plan", *question.split(), "--json"]
    best = {"cold": (float("inf"), float("inf")), "warm": (float("inf"), float("inf"))}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, ENV_DIR: cache}
        subprocess.run(argv, capture_output=True, check=True, env=env)
        for _ in range(repeats):
            for which in best:
                if which == "cold":
                    shutil.rmtree(Path(cache) / "prices", ignore_errors=True)
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                subprocess.run(argv, capture_output=True, check=True, env=env)
                wall = time.perf_counter() - t
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                best[which] = (min(best[which][0], wall), min(best[which][1], cpu))
    return best


def _descendants(pid: int) -> list[int]:
    """`pid` and every process under it (Linux /proc: each thread's children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass  # gone meanwhile
    return out


def _peak_kib(pid: int) -> tuple[bytes, int] | None:
    """The program a process runs (its command line) and its peak resident set (VmHWM, KiB); None when it
    is gone or a zombie. A child between fork and exec still shows its parent's memory and command line: its
    peak counts from the program it then runs (exec starts a new VmHWM)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            program = f.read()
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:") and program:
                    return program, int(line.split()[1])
    except OSError:
        return None
    return None


@contextlib.contextmanager
def mock_server(token_ms: float):
    """The mock server in its own process; yields its URL."""
    mock = subprocess.Popen(
        [sys.executable, "-m", "servelab.bench.mock_server", "--port", str(MOCK_PORT), "--token-delay-ms",
         str(token_ms)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", MOCK_PORT), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{MOCK_PORT}"
    finally:
        mock.terminate()
        mock.wait()


# Runs a module as `python -m` would, then writes its own peak resident set to the file named by
# SPEED_PEAK_FILE: VmHWM, the peak of this program since exec (getrusage's ru_maxrss would not do: Linux keeps
# across exec the peak of the forked copy of the process that launched it). Sampling from outside may miss the
# last milliseconds of a busy process; this may not.
PEAK_WRAPPER = """
import json, os, runpy, sys
module, sys.argv = sys.argv[1], sys.argv[1:]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
finally:
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    with open(os.environ["SPEED_PEAK_FILE"], "w") as f:
        json.dump({"self_kib": kib}, f)
"""


def peak_memory(argv: list[str]) -> dict[int, int]:
    """Run `python -m MODULE ARGS` (argv); the peak resident set (KiB) of it (written by itself at exit) and
    of each process under it (VmHWM, read from /proc every 10 ms while each lives), by process id (0: it)."""
    assert argv[1] == "-m"
    with tempfile.NamedTemporaryFile(suffix=".json") as peak_file:
        env = dict(os.environ, SPEED_PEAK_FILE=peak_file.name)
        peaks = _sampled([argv[0], "-c", PEAK_WRAPPER, *argv[2:]], env)
        return peaks | {0: json.loads(Path(peak_file.name).read_text())["self_kib"]}


def _sampled(argv: list[str], env: dict[str, str]) -> dict[int, int]:
    """Run `argv`; the peak resident set of each process under it (not its own)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    seen: dict[int, tuple[bytes, int]] = {}  # pid -> (program, its peak)
    done = threading.Event()
    first = _peak_kib(proc.pid)  # Popen returns once the child has exec'd
    own = first[0] if first is not None else b""  # the parent's command line

    def sample() -> None:
        while not done.is_set():
            for pid in _descendants(proc.pid):
                now = _peak_kib(pid)
                if now is None or pid == proc.pid:
                    continue
                program, kib = now
                if program == own:
                    continue  # forked, not yet exec'd: it shows the parent's memory, not its own
                before = seen.get(pid)
                if before is not None and before[0] == program:
                    kib = max(kib, before[1])
                seen[pid] = (program, kib)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[3:5]} failed ({proc.returncode}): {err[-2000:]}")
    return {pid: kib for pid, (_, kib) in seen.items()}


def bench_memory(num_prompts: int) -> dict:
    """A `servelab bench` of `num_prompts` requests against the mock server (its own process, 1 ms a token,
    16 tokens, concurrency 256, 32-word prompts), as a fresh process: the sum over its processes (the
    parent, its workers and multiprocessing's resource tracker) of each one's peak resident set, and its
    rate."""
    with mock_server(1.0) as url, tempfile.TemporaryDirectory() as out:
        argv = [sys.executable, "-m", "servelab.cli.main", "bench", "--base-url", url, "--model", "mock",
                "--random-input-len", "32", "--random-output-len", "16", "--num-prompts", str(num_prompts),
                "--max-concurrency", "256", "--no-live", "--save-result", "--result-dir", out,
                "--result-filename", "r.json"]  # fmt: skip
        peaks = peak_memory(argv)
        result = json.loads((Path(out) / "r.json").read_text())
    return {
        "peak_mb": sum(peaks.values()) / 1024,
        "processes_mb": sorted((kib / 1024 for kib in peaks.values()), reverse=True),
        "req_s": result["request_throughput"],
        "completed": result["completed"],
    }


# `servelab run` of 6 short benches against the mock server: 2 configs (concurrency 1 and 8) of 3 repetitions,
# each with warm-ups at its own concurrency
RUN_WORKLOAD = """
name: six-short-benches
gpu: H200
vllm: {model: mock}
vllm_bench:
  configs:
    - name: s
      input_len: 32
      output_len: 16
      num_prompts: [20, 80]
      max_concurrency: [1, 8]
      repetitions: 3
      args: {num_warmups: 4}
"""


WARMUP_DONE = re.compile(r"^warm-up: \d+ done, \d+ failed in ([0-9.]+) s$", re.M)


def run_of_six(repeats: int) -> tuple[float, float, float]:
    """Best wall time of `servelab run` (a fresh process attached to the mock server at 2 ms a token) of
    RUN_WORKLOAD's 6 benches, and in that run the sum of the benches' own durations (their results'
    `duration`: T0 to the last request's end) and of their warm-up phases (as their lines say, to 0.1 s:
    the ready check and the warm-ups, and a worker process's start where the bench waits for one)."""
    best = (float("inf"), 0.0, 0.0)
    with mock_server(2.0) as url, tempfile.TemporaryDirectory() as tmp:
        workload = Path(tmp) / "six.yaml"
        workload.write_text(RUN_WORKLOAD)
        for k in range(repeats):
            store = Path(tmp) / f"store-{k}"
            argv = [*servelab_argv(), "run", str(workload), "--base-url", url, "--model", "mock", "--store",
                    str(store / "results.db"), "--json"]  # fmt: skip
            t = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, check=True, text=True)
            wall = time.perf_counter() - t
            run_dir = Path(json.loads(done.stdout)["run_dir"])
            durations = [json.loads(p.read_text())["duration"] for p in run_dir.glob("bench-*.json")]
            warmups = [float(x) for x in WARMUP_DONE.findall(done.stderr)]
            assert len(durations) == len(warmups) == 6, done.stderr[-2000:]
            best = min(best, (wall, sum(durations), sum(warmups)))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--bench-prompts", type=int, default=300_000, help="0 skips the bench memory row")
    parser.add_argument("--only-run", action="store_true", help="only the `servelab run` row (best of 3)")
    args = parser.parse_args()
    wall, benches, warmups = run_of_six(3)
    print(
        f"{'run of 6 short benches (s)':32s} {wall:10.3f}   the benches' durations {benches:.3f} s   "
        f"ratio {wall / benches:.2f}   warm-up phases {warmups:.1f} s   "
        f"the rest {wall - benches - warmups:.2f} s"
    )
    if args.only_run:
        return
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
        times = fresh_plan_s(max(1, args.repeats // 2 + 1), question)
        for which, (wall, cpu) in times.items():
            row = f"{name[:-4]}, {which} {name[-3:]}"
            print(f"{row:38s} {wall:10.3f}   target {target:g}   ratio {wall / target:.2f}   cpu {cpu:.3f} s")
    if args.bench_prompts:
        mem = bench_memory(args.bench_prompts)
        name = f"bench {args.bench_prompts:,} requests (MB)"
        value, target = mem["peak_mb"], BENCH_MEMORY_TARGET_MB
        print(f"{name:32s} {value:10.3f}   target {target:g}   ratio {value / target:.2f}")
        per_process = " + ".join(f"{mb:.0f}" for mb in mem["processes_mb"])
        print(
            f"  bench: peak resident sets {per_process} MB (the parent first), {mem['completed']:,} "
            f"completed at {mem['req_s']:,.0f} req/s"
        )


if __name__ == "__main__":
    main()
