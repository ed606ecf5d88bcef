"""Attention through PyTorch SDPA: causal prefill and one-token decode, GQA through enable_gqa (no K/V
copies).

The backend is chosen the way SDPA's own priority would on H200 (cuDNN first, then flash, memory-efficient,
math) and recorded in the row. Sliding-window prefill runs in window-sized query chunks against the two chunks
they can see (a banded mask), so its cost grows with seq x window as a windowed kernel's does (about twice the
ideal flops). An FP8 KV cache is dequantized to bf16 inside the op (SDPA has no fp8 path): the row says so.
"""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from servelab.collect.ops.common import Unsupported, Variant, first_working, rand, rand_fp8
from servelab.collect.timing import time_op

BACKEND_ORDER = ("cudnn", "flash", "efficient", "math")


def _sdpa_backends():
    return {
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }


def sdpa_variants(make_inputs, call, suffix: str = "") -> list[Variant]:
    """One Variant per SDPA backend, in priority order, each forcing that backend around call(*inputs)."""
    backends = _sdpa_backends()
    out = []
    for name in BACKEND_ORDER:

        def run(*inputs, _b=backends[name]):
            with sdpa_kernel(_b):
                return call(*inputs)

        out.append(Variant(name + suffix, make_inputs, run))
    return out


def prefill_variants(key) -> tuple[list[Variant], int]:
    b, s, h, kvh, d, w = key.batch, key.seq, key.heads, key.kv_heads, key.head_dim, key.window
    gqa = h != kvh
    if not w or s <= w:

        def make():
            return rand(b, h, s, d), rand(b, kvh, s, d), rand(b, kvh, s, d)

        def call(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

        return sdpa_variants(make, call), b * s * (h + 2 * kvh) * d * 2
    c = w
    chunks = -(-s // c)
    band = torch.ones(c, 2 * c, dtype=torch.bool, device="cuda")
    j = torch.arange(c, device="cuda")[:, None]
    r = torch.arange(2 * c, device="cuda")[None, :]
    band = (r > j) & (r <= j + c)  # query j of a chunk sees the w keys ending at itself

    def make_w():  # the key/value layout of a windowed kernel: each chunk with the chunk before it
        return rand(b * chunks, h, c, d), rand(b * chunks, kvh, 2 * c, d), rand(b * chunks, kvh, 2 * c, d)

    def call_w(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=band, enable_gqa=gqa)

    return sdpa_variants(make_w, call_w, "+window_chunks"), b * chunks * c * (h + 4 * kvh) * d * 2


def decode_variants(key) -> tuple[list[Variant], int]:
    b, h, kvh, d = key.batch, key.heads, key.kv_heads, key.head_dim
    L = min(key.kv_len, key.window) if key.window else key.kv_len
    gqa = h != kvh
    if key.kv_dtype in ("bf16", "fp16"):

        def make():
            return rand(b, h, 1, d), rand(b, kvh, L, d), rand(b, kvh, L, d)

        def call(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)

        return sdpa_variants(make, call), b * kvh * L * d * 4
    if key.kv_dtype == "fp8":

        def make8():
            return rand(b, h, 1, d), rand_fp8(b, kvh, L, d), rand_fp8(b, kvh, L, d)

        def call8(q, k, v):
            return F.scaled_dot_product_attention(
                q, k.to(torch.bfloat16), v.to(torch.bfloat16), enable_gqa=gqa
            )

        return sdpa_variants(make8, call8, "+fp8_dequant"), b * kvh * L * d * 2
    raise Unsupported(f"KV dtype {key.kv_dtype} has no attention kernel here")


def _bench(variants, bytes_per_set, flops) -> dict:
    v = first_working(variants)
    t = time_op(v.make_inputs, v.run, bytes_per_set)
    t["backend"] = v.backend
    t["tflops"] = flops / (t["latency_us"] * 1e-6) / 1e12
    return t


def bench_prefill(key) -> dict:
    variants, nbytes = prefill_variants(key)
    keys = min(key.seq, key.window) if key.window else (key.seq + 1) / 2
    return _bench(variants, nbytes, 4.0 * key.batch * key.heads * key.seq * keys * key.head_dim)


def bench_decode(key) -> dict:
    variants, nbytes = decode_variants(key)
    t = _bench(variants, nbytes, 4.0 * key.batch * key.heads * key.kv_len * key.head_dim)
    t["kv_tbs"] = nbytes / (t["latency_us"] * 1e-6) / 1e12
    return t
