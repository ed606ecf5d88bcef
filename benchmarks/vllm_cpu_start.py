"""A CPU vLLM's start, as the tests make it (servelab.runner.vllm_cpu): wall time until /health answers and
the CPU of the server's processes by then, by default and with QUICK_START_ARGS / QUICK_START_ENV, alternated.

    python benchmarks/vllm_cpu_start.py MODEL_DIR [--rounds 2] [--python .venv-vllm/bin/python]

MODEL_DIR: a model folder the CPU vLLM serves (the tests' tiny Llama: `python -m servelab.runner.tiny_llama
DIR --python .venv-vllm/bin/python`). The CPU is the sum of user and system time, from /proc, of every process
in the server's session (its own and its reaped children's) when /health first answers: other work on the
machine moves it less than the wall time.
"""

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from servelab.runner.server import free_port
from servelab.runner.vllm_cpu import CPU_ENV, QUICK_START_ARGS, QUICK_START_ENV, cpu_server_argv

TICK = os.sysconf("SC_CLK_TCK")


def session_cpu(session: int) -> float:
    """User + system seconds of every process in `session`, with their reaped children's."""
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[3]) == session:  # stat's 6th field, the session; utime..cstime are the 14th-17th
            total += sum(int(x) for x in fields[11:15]) / TICK
    return total


def start(python: Path, model: Path, quick: bool) -> tuple[float, float]:
    port = free_port(18900, 19000)
    argv = cpu_server_argv(python, model, port, extra_args=QUICK_START_ARGS if quick else None)
    env = os.environ | CPU_ENV | (QUICK_START_ENV if quick else {})
    began = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    sys.exit(f"error: the server ended with status {proc.returncode} before it answered")
                time.sleep(0.25)
        return time.perf_counter() - began, session_cpu(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--python", type=Path, default=Path(".venv-vllm/bin/python"))
    args = ap.parse_args()
    if not (args.model / "config.json").is_file():
        ap.exit(2, f"model: {args.model} has no config.json (expected a model folder)\n")
    if not args.python.is_file():
        ap.exit(2, f"--python: {args.python} is not a file (expected the CPU vLLM venv's python)\n")
    print("start                   wall (s)  CPU (s)")
    for _ in range(args.rounds):
        for quick in (False, True):
            wall, cpu = start(args.python, args.model, quick)
            print(f"{'quick' if quick else 'default':<22} {wall:9.1f} {cpu:8.1f}", flush=True)


if __name__ == "__main__":
    main()
