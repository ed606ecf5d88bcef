"""Bandwidth-bound elementwise op (norms, activations, rope, mixing): `bytes` moved, half read and half
written, as one bf16 scale-and-cast pass. Keys with flops > 0 are measured as the same pass (their flops are
tiny)."""

import torch

from servelab.collect.ops.common import rand
from servelab.collect.timing import time_op


def bench(key) -> dict:
    n = max(1, key.bytes // 4)

    def make():
        return rand(n), torch.empty(n, device="cuda", dtype=torch.bfloat16)

    def run(x, out):
        return torch.mul(x, 1.0001, out=out)

    t = time_op(make, run, n * 4)
    t["backend"] = "torch_mul"
    t["tbs"] = key.bytes / (t["latency_us"] * 1e-6) / 1e12
    return t
