"""GEMM: C[m, n] = A[m, k] @ W[n, k]^T in bf16, fp8 with row-wise scales, and fp8 with DeepSeek's 128x128
weight blocks (1x128 activation groups). The activation quantization kernel is not included (a separate
elementwise op)."""

import torch

from servelab.collect.ops.common import Unsupported, Variant, first_working, rand, rand_fp8, rand_scale
from servelab.collect.timing import time_op


def variants(key) -> list[Variant]:
    m, n, k = key.m, key.n, key.k
    if key.dtype in ("bf16", "fp16"):
        dt = torch.bfloat16 if key.dtype == "bf16" else torch.float16
        return [
            Variant("cublas", lambda: (rand(m, k, dtype=dt), rand(n, k, dtype=dt)), lambda a, w: a @ w.t())
        ]
    if key.dtype == "fp8":

        def make():
            return rand_fp8(m, k), rand_fp8(n, k), rand_scale(m, 1), rand_scale(1, n)

        def run(a, w, sa, sb):
            return torch._scaled_mm(
                a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=True
            )

        return [Variant("cublas_rowwise", make, run)]
    if key.dtype == "fp8_block":
        if k % 512:
            # seen on H200 (cuBLAS 13.0): K = 256 read out of bounds (an illegal address that kills the
            # process)
            raise Unsupported(
                f"cuBLAS blockwise fp8 is only run here for K divisible by 512 (K/128 scale rows "
                f"aligned to 16 bytes), got K={k}"
            )
        kb, nb = k // 128, -(-n // 128)

        def make_outer():  # 1x128 activation scales stored outer-dim-major, as cuBLAS asks
            return rand_fp8(m, k), rand_fp8(n, k), rand_scale(kb, m).t(), rand_scale(nb, kb).t()

        def make_contig():
            return rand_fp8(m, k), rand_fp8(n, k), rand_scale(m, kb), rand_scale(kb, nb)

        def run(a, w, sa, sb):
            return torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

        mp = -(-m // 16) * 16  # cuBLAS refuses blockwise scaling for small unaligned M; engines pad M too

        def make_padded():
            return rand_fp8(mp, k), rand_fp8(n, k), rand_scale(kb, mp).t(), rand_scale(nb, kb).t()

        return [
            Variant("cublas_blockwise", make_outer, run),
            Variant("cublas_blockwise", make_contig, run),
            Variant("cublas_blockwise(m padded to 16)", make_padded, run),
        ]
    raise Unsupported(f"GEMM dtype {key.dtype} has no kernel on this GPU")


def bench(key) -> dict:
    v = first_working(variants(key))
    wb = 2 if key.dtype in ("bf16", "fp16") else 1
    bytes_per_set = key.m * key.k * wb + key.n * key.k * wb
    t = time_op(v.make_inputs, v.run, bytes_per_set)
    t["backend"] = v.backend
    t["tflops"] = 2.0 * key.m * key.n * key.k / (t["latency_us"] * 1e-6) / 1e12
    return t
