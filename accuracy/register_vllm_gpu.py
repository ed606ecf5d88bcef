"""Register the twin's predictions of held-out vLLM GPU runs before they run: `servelab bench --simulate` with
each run's settings (as bench.sh sends them: 5 x C prompts, at least 16; seed C x 10 + ISL + OFFSET), on each
system the device may turn out to be, and a REGISTERED.txt with every prediction's sha256 and main's commit.

    PYTHONPATH=src python accuracy/register_vllm_gpu.py OUT_DIR --model Qwen/Qwen3-30B-A3B --offset 201 \
        "M 1024 256 2,16,64" "N 4096 256 8,32"

--server-args "--max-num-batched-tokens 2048 --max-num-seqs 48 --gpu-memory-utilization 0.83" prices a server
started with these limits (start.sh's SERVER_ARGS); unset, vLLM 0.25.0's defaults.
"""

import argparse
import datetime
import hashlib
import subprocess
import sys
from pathlib import Path

import twin_vs_vllm_gpu

ROOT = Path(__file__).resolve().parents[1]

LIMITS = {"--max-num-seqs": 1024, "--max-num-batched-tokens": 8192}  # vLLM 0.25.0's defaults on an 80 GB+ GPU


def parse_run(text: str) -> tuple[str, int, int, list[int]]:
    try:
        tag, isl, osl, clients = text.split()
        return tag, int(isl), int(osl), [int(c) for c in clients.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'TAG ISL OSL C[,C...]', got {text!r}") from None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("runs", nargs="+", type=parse_run)
    ap.add_argument("--model", default=twin_vs_vllm_gpu.LLAMA_8B)
    ap.add_argument("--offset", type=int, default=0, help="bench.sh's SEED_OFFSET")
    ap.add_argument("--systems", default="h100_sxm,h200_sxm")
    ap.add_argument(
        "--server-args",
        type=twin_vs_vllm_gpu.parse_server_args,
        default={},
        help="the server's scheduler limits, as start.sh's SERVER_ARGS (default: vLLM's)",
    )
    ap.add_argument(
        "--client-workers",
        type=int,
        default=15,
        help="the most client processes the run's `servelab bench` starts (one per core less one: 15 on the "
        "device's 16 cores); each run has min(C, this)",
    )
    args = ap.parse_args()
    limits = {**LIMITS, **args.server_args}
    args.out.mkdir(parents=True, exist_ok=True)
    for system in args.systems.split(","):
        for tag, isl, osl, clients in args.runs:
            for c in clients:
                cfg = {
                    "random_input_len": isl,
                    "random_output_len": osl,
                    "random_range_ratio": 0.8,
                    "random_range_rule": "inferencex",
                    "max_concurrency": c,
                    "num_prompts": max(16, 5 * c),
                    "seed": c * 10 + isl + args.offset,
                }
                path = args.out / f"{system}_{tag}_c{c}.json"
                client = {"num_workers": min(c, args.client_workers)}
                run = {"config": cfg, "client": client}
                twin_vs_vllm_gpu.simulate(
                    twin_vs_vllm_gpu.simulate_argv(run, system, limits, path, args.model), path
                )
                print(path.name, flush=True)
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    now = datetime.datetime.now(datetime.UTC)
    lines = [
        f"twin predictions made at {now:%Y-%m-%dT%H:%M:%SZ} with main {rev}, before any measurement; model "
        f"{args.model}; seeds c*10+isl+{args.offset} as bench.sh with SEED_OFFSET={args.offset}; "
        f"client workers min(C, {args.client_workers}); server limits "
        + " ".join(f"{flag} {value}" for flag, value in limits.items())
    ]
    for path in sorted(args.out.glob("*.json")):
        lines.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}")
    (args.out / "REGISTERED.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
