"""Where one rank's prefill step spends its GPU time: the --shard-of stack of accuracy/gpu_tp_step_check.py
(rank 0 of a T-way TP + EP split alone on one GPU), one prefill shape, timed (CUDA events, median) and then
under torch.profiler: the GPU time of each kernel, and of each aten op that launched kernels (its own kernels'
time), per step, largest first. --lean runs the MoE on the local (token, pick) pairs alone (eager only: it
finds them with a host sync).
Runs on the device only:

    python accuracy/gpu_shard_profile.py --shard-of 8 --model minimax-m2.5 --layers 16 --seq 8192 \\
        [--compile | --lean] --out $OUT/profile.json
"""

import argparse
import json
from pathlib import Path

import torch
from gpu_shard_shapes import MODEL_CONFIGS, read_config
from gpu_tp_step_check import RankShard, check_moe, timed
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

STEPS = 3


def self_gpu_us(event) -> float:
    """The op's own GPU time, under either name torch has given it."""
    found = getattr(event, "self_device_time_total", None)
    return float(found if found is not None else getattr(event, "self_cuda_time_total", 0.0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shard-of", type=int, default=8)
    ap.add_argument("--model", default="minimax-m2.5", choices=sorted(MODEL_CONFIGS))
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--lean", action="store_true", help="the MoE on the local pairs alone (eager only)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    stack = RankShard(read_config(args.model), args.layers, args.shard_of)
    stack.lean = args.lean and not args.compile
    if args.compile:
        stack.attention_fn = torch.compile(stack.attention, dynamic=False)
        stack.ffn_fn = torch.compile(stack.ffn, dynamic=False)
    tokens = torch.randint(0, stack.d.vocab, (1, args.seq), device="cuda")
    pos = torch.arange(args.seq, device="cuda")
    with torch.inference_mode():
        check_moe(stack)
        for _ in range(3):
            stack.forward(tokens, pos)
        step_ms = timed(lambda: stack.forward(tokens, pos), 7)[0]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(STEPS):
                stack.forward(tokens, pos)
            torch.cuda.synchronize()
    kernels, ops = [], []
    for e in prof.key_averages():
        row = (e.key, self_gpu_us(e) / STEPS / 1000, e.count // STEPS)
        if row[1] > 0:
            (kernels if getattr(e, "device_type", None) == DeviceType.CUDA else ops).append(row)
    kernels.sort(key=lambda r: -r[1])
    ops.sort(key=lambda r: -r[1])
    total = sum(ms for _, ms, _ in kernels)
    print(f"{args.model} rank 0 of {args.shard_of}, {args.layers} layers, prefill s{args.seq}, ", end="")
    kind = "compiled" if args.compile else "eager, lean MoE" if stack.lean else "eager"
    print(f"{kind}: step {step_ms:.2f} ms (median of 7), {total:.2f} ms of kernel time a step")
    for title, rows in (("kernels", kernels), ("ops (their kernels' time)", ops)):
        print(title)
        for name, ms, count in rows[:25]:
            print(f"{ms:9.3f} ms {100 * ms / total:5.1f} % x{count:<5} {name[:100]}")
    Path(args.out).write_text(
        json.dumps(
            dict(
                gpu=torch.cuda.get_device_name(0),
                torch=torch.__version__,
                args=vars(args),
                step_ms=step_ms,
                step_kernel_ms=total,
                kernels=[dict(name=n, ms_per_step=ms, calls_per_step=c) for n, ms, c in kernels],
                ops=[dict(name=n, ms_per_step=ms, calls_per_step=c) for n, ms, c in ops],
            ),
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
