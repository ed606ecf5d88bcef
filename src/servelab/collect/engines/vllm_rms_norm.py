"""vLLM's bandwidth-bound kernels of a step, timed as its RMSNorm: `_C.rms_norm` from the wheel (loaded with
torch.ops.load_library; nothing of vLLM is imported).

A Memory key is bytes moved (half read, half written) in `kernels` launches. vLLM runs many such kernels in a
DeepSeek-V4 step (its TileLang mHC pre / post with the RMSNorm fused in, the MoE top-k, permute and combine,
the final RMSNorm); `rms_norm` is the one of them that loads standalone on the device, so it stands in for
all: each launch normalises rows of up to 4,096 bf16 values (DeepSeek-V4-Flash's hidden size), reading and
writing bytes / kernels between them, as vLLM's norms and elementwise kernels stream their operands once.
"""

import torch

from servelab.collect.ops.common import Unsupported, rand
from servelab.collect.timing import time_op

HIDDEN = 4096
EPS = 1e-6
BACKEND = "vllm rms_norm (_C, bf16 rows of up to 4,096 values)"


def rows(nbytes: int, kernels: int) -> tuple[int, int]:
    """(rows, width) of one launch's bf16 input moving nbytes / kernels (2 bytes read + 2 written a value)."""
    values = max(1, nbytes // (4 * max(1, kernels)))
    width = min(HIDDEN, values)
    return -(-values // width), width


def bench(key, files) -> dict:
    if files is None:
        raise Unsupported("the RMSNorm entry loads _C from the vLLM wheel: --engine-files")
    kernels = max(1, key.kernels)
    n_rows, width = rows(key.bytes, kernels)

    def make():
        weight = rand(width)
        pairs = tuple(
            (rand(n_rows, width), torch.empty(n_rows, width, dtype=torch.bfloat16, device="cuda"))
            for _ in range(kernels)
        )
        return weight, pairs

    def run(weight, pairs):
        for x, out in pairs:
            torch.ops._C.rms_norm(out, x, weight, EPS)
        return pairs[-1][1]

    t = time_op(make, run, 4 * n_rows * width * kernels)
    t["backend"] = BACKEND
    t["rows"], t["width"] = n_rows, width
    t["tbs"] = key.bytes / (t["latency_us"] * 1e-6) / 1e12
    return t
