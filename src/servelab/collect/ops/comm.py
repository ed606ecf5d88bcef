"""NCCL collectives through torch.distributed, one process per GPU, captured in CUDA graphs like every other
op.

`bytes` is the per-rank buffer (keys.Comm): all_reduce input, all_gather output, reduce_scatter input,
all_to_all bytes sent, p2p message (rank 0 -> rank 1). Elements are bf16. Ranks agree on the calls per replay
and the replays (the slowest rank's estimate), so every rank captures the same sequence of collectives.
"""

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from servelab.collect.ops.common import Unsupported, rand
from servelab.collect.timing import time_op
from servelab.perfdb.ops import OpName


def bench(key, rank: int, group) -> dict:
    g = key.gpus
    n = max(g, key.bytes // 2 // g * g)  # elements, divisible by the group size

    def agree(est_us: float) -> float:
        t = torch.tensor([est_us], device="cuda", dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return float(t.item())

    run: Callable[..., Any]  # point-to-point and all-reduce work in place, the others into an output
    if key.op == OpName.allreduce:

        def make():
            return (rand(n),)

        def run_allreduce(x):
            dist.all_reduce(x, group=group)
            return x

        run = run_allreduce
    elif key.op == "allgather":

        def make():
            return rand(n // g), torch.empty(n, device="cuda", dtype=torch.bfloat16)

        def run_allgather(x, out):
            dist.all_gather_into_tensor(out, x, group=group)
            return out

        run = run_allgather
    elif key.op == "reducescatter":

        def make():
            return rand(n), torch.empty(n // g, device="cuda", dtype=torch.bfloat16)

        def run_reducescatter(x, out):
            dist.reduce_scatter_tensor(out, x, group=group)
            return out

        run = run_reducescatter
    elif key.op == "alltoall":

        def make():
            return rand(n), torch.empty(n, device="cuda", dtype=torch.bfloat16)

        def run_alltoall(x, out):
            dist.all_to_all_single(out, x, group=group)
            return out

        run = run_alltoall
    elif key.op == OpName.p2p:

        def make():
            return (rand(n),)

        def run_p2p(x):
            if rank == 0:
                dist.send(x, dst=1, group=group)
            elif rank == 1:
                dist.recv(x, src=0, group=group)
            return x

        run = run_p2p
    else:
        raise Unsupported(f"collective {key.op}")
    t = time_op(make, run, n * 2 * 2, agree=agree, check_output=False)
    t["backend"] = "nccl"
    t["busbw_gbs"] = _busbw(key) / (t["latency_us"] * 1e-6) / 1e9
    return t


def _busbw(key) -> float:
    g = key.gpus
    if key.op == OpName.allreduce:
        return 2.0 * (g - 1) / g * key.bytes
    if key.op == OpName.p2p:
        return float(key.bytes)
    return (g - 1) / g * key.bytes
