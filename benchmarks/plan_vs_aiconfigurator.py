"""servelab plan vs AIConfigurator on the same question, side by side, in one run.

    python benchmarks/plan_vs_aiconfigurator.py [--runs 3] [--install] [--skip-aic]

Question: DeepSeek-V3 on 8x H200 SXM, 4000/1000 tokens, TTFT <= 2000 ms, TPOT <= 30 ms, the whole search
space. servelab runs as the CLI a user types (a fresh process each time, imports included) and in-process;
AIConfigurator (`aiconfigurator cli default`, PyPI aiconfigurator==0.12.0) runs from its own venv under
.cache/ (never the project's; --install creates it). Prints wall times, peak RSS, the ratio, and both tools'
best configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servelab.predict.plan import PlanRequest, make_plan

ROOT = Path(__file__).resolve().parents[1]
AIC_VENV = ROOT / ".cache" / "aic-plan-venv"
AIC_VERSION = "0.12.0"
QUESTION = {
    "model": "deepseek-ai/DeepSeek-V3",
    "system": "h200_sxm",
    "gpus": 8,
    "isl": 4000,
    "osl": 1000,
    "ttft_ms": 2000,
    "tpot_ms": 30,
}


def servelab_argv() -> list[str]:
    q = QUESTION
    exe = shutil.which("servelab", path=str(Path(sys.executable).parent)) or "servelab"
    return [
        exe,
        "plan",
        q["model"],
        "--system",
        q["system"],
        "--gpus",
        str(q["gpus"]),
        "--isl",
        str(q["isl"]),
        "--osl",
        str(q["osl"]),
        "--ttft-ms",
        str(q["ttft_ms"]),
        "--tpot-ms",
        str(q["tpot_ms"]),
        "--json",
    ]


def aic_argv(save_dir: str) -> list[str]:
    q = QUESTION
    return [
        str(AIC_VENV / "bin" / "aiconfigurator"),
        "cli",
        "default",
        "--model-path",
        q["model"],
        "--total-gpus",
        str(q["gpus"]),
        "--system",
        q["system"],
        "--isl",
        str(q["isl"]),
        "--osl",
        str(q["osl"]),
        "--ttft",
        str(q["ttft_ms"]),
        "--tpot",
        str(q["tpot_ms"]),
        "--save-dir",
        save_dir,
    ]


def timed(argv: list[str], env: dict | None = None) -> tuple[float, int, subprocess.CompletedProcess]:
    """Wall seconds, peak RSS of the child in MB (getrusage of children: max over children so far), result."""
    t = time.perf_counter()
    proc = subprocess.run(argv, check=False, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
    return wall, rss_mb, proc


def install_aic() -> None:
    subprocess.run([sys.executable, "-m", "venv", str(AIC_VENV)], check=True)
    subprocess.run(
        [str(AIC_VENV / "bin" / "pip"), "install", "-q", f"aiconfigurator=={AIC_VERSION}"], check=True
    )


def run_servelab(runs: int) -> dict:
    walls, best, rss = [], None, 0
    for _ in range(runs):
        wall, rss, proc = timed(servelab_argv())
        if proc.returncode != 0:
            raise SystemExit(f"servelab plan failed: {proc.stderr.strip()}")
        walls.append(wall)
        best = json.loads(proc.stdout)
    make_plan(PlanRequest(**QUESTION))  # warm imports, then time the search alone in a warm process
    t = time.perf_counter()
    make_plan(PlanRequest(**QUESTION))
    in_process = time.perf_counter() - t
    top = best["candidates"][0]
    return {
        "cli_wall_s": walls,
        "cli_best_s": min(walls),
        "in_process_s": in_process,
        "peak_rss_mb": rss,
        "considered": best["considered"],
        "search_ms": best["wall_ms"],
        "best": f"{top['mode']} {top['parallel']['label']} conc {top['concurrency']}: "
        f"{top['tok_s_per_gpu']:.0f} tok/s/GPU, {top['tok_s_per_user']:.1f} tok/s/user, "
        f"TTFT {top['ttft_ms']:.0f} ms, TPOT {top['tpot_ms']:.1f} ms",
    }


def run_aic() -> dict:
    with tempfile.TemporaryDirectory() as save:
        env = dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1")
        wall, rss, proc = timed(aic_argv(save), env)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        return {
            "wall_s": wall,
            "error": out.strip().splitlines()[-1] if out.strip() else f"exit {proc.returncode}",
        }
    best = [ln.strip() for ln in out.splitlines() if re.search(r"best|Best|tokens/s/gpu", ln)][:6]
    return {"wall_s": wall, "peak_rss_mb": rss, "summary": best}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="servelab CLI runs (best wall time is reported)")
    ap.add_argument(
        "--install", action="store_true", help=f"create {AIC_VENV} with aiconfigurator=={AIC_VERSION}"
    )
    ap.add_argument("--skip-aic", action="store_true", help="time servelab only")
    args = ap.parse_args()
    print(f"question: {json.dumps(QUESTION)}")
    ours = run_servelab(args.runs)
    print(
        f"servelab plan (CLI, fresh process): best {ours['cli_best_s']:.3f} s over {args.runs} runs "
        f"({', '.join(f'{w:.3f}' for w in ours['cli_wall_s'])}); search alone {ours['search_ms']:.0f} ms; "
        f"in a warm process {ours['in_process_s'] * 1000:.0f} ms; peak RSS {ours['peak_rss_mb']} MB"
    )
    print(f"  searched: {ours['considered']}")
    print(f"  best: {ours['best']}")
    if args.skip_aic:
        return
    if not (AIC_VENV / "bin" / "aiconfigurator").exists():
        if not args.install:
            raise SystemExit(f"AIConfigurator is not installed in {AIC_VENV}; rerun with --install")
        install_aic()
    theirs = run_aic()
    if "error" in theirs:
        print(f"aiconfigurator cli default: failed after {theirs['wall_s']:.1f} s: {theirs['error']}")
        return
    print(
        f"aiconfigurator cli default ({AIC_VERSION}): {theirs['wall_s']:.1f} s, "
        f"peak RSS {theirs['peak_rss_mb']} MB"
    )
    for line in theirs["summary"]:
        print(f"  {line}")
    print(
        f"ratio: servelab is {theirs['wall_s'] / ours['cli_best_s']:.0f}x faster "
        "(CLI wall time against CLI wall time)"
    )


if __name__ == "__main__":
    main()
