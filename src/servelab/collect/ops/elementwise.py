"""Bandwidth-bound elementwise op (norms, activations, rope, mixing): `bytes` moved, half read and half
written, as bf16 scale-and-cast passes, one per launch the key counts (`kernels`), each moving its share.
Keys with flops > 0 are measured as the same passes (their flops are tiny)."""

import torch

from servelab.collect.ops.common import rand
from servelab.collect.timing import time_op


def bench(key) -> dict:
    kernels = max(1, key.kernels)
    n = max(1, key.bytes // (4 * kernels))

    def make():
        return tuple((rand(n), torch.empty(n, device="cuda", dtype=torch.bfloat16)) for _ in range(kernels))

    def run(*pairs):
        for x, out in pairs:
            torch.mul(x, 1.0001, out=out)
        return pairs[-1][1]

    t = time_op(make, run, n * 4 * kernels)
    t["backend"] = "torch_mul"
    t["tbs"] = key.bytes / (t["latency_us"] * 1e-6) / 1e12
    return t
