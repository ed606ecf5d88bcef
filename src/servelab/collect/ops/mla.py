"""MLA (DeepSeek-V3): prefill as multi-head attention (q/k 192 = 128 nope + 64 rope, v 128) through SDPA, and
the absorbed decode: each query head (576 = 512 latent + 64 rope) against the one shared latent cache, values
being the cache's first 512 columns. SDPA treats the decode as one KV head with the heads as query rows; where
no SDPA backend takes head dim 576 the decode runs as bmm + softmax + bmm (backend "bmm"), which writes the
scores that a FlashMLA kernel keeps on chip: the row says which ran."""

import torch
import torch.nn.functional as F

from servelab.collect.ops.attention import sdpa_variants
from servelab.collect.ops.common import Unsupported, Variant, fastest, first_working, rand, rand_fp8
from servelab.collect.timing import time_op

LATENT, ROPE, NOPE, V = 512, 64, 128, 128


def bench_prefill(key) -> dict:
    b, s, h = key.batch, key.seq, key.heads

    def make():
        return rand(b, h, s, NOPE + ROPE), rand(b, h, s, NOPE + ROPE), rand(b, h, s, V)

    def call(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    v = first_working(sdpa_variants(make, call))
    t = time_op(v.make_inputs, v.run, b * s * h * (2 * (NOPE + ROPE) + V) * 2)
    t["backend"] = v.backend
    return t


def bench_decode(key) -> dict:
    b, L, h = key.batch, key.kv_len, key.heads
    width = LATENT + ROPE
    scale = 1.0 / (NOPE + ROPE) ** 0.5
    if key.kv_dtype not in ("bf16", "fp16", "fp8"):
        raise Unsupported(f"MLA KV dtype {key.kv_dtype}")
    fp8 = key.kv_dtype == "fp8"

    def make():
        cache = rand_fp8(b, L, width) if fp8 else rand(b, L, width)
        return rand(b, 1, h, width), cache

    def deq(cache):
        return cache.to(torch.bfloat16) if fp8 else cache

    def call_sdpa(q, cache):
        kv = deq(cache).unsqueeze(1)
        return F.scaled_dot_product_attention(q, kv, kv[..., :LATENT], scale=scale)

    def run_bmm(q, cache):
        kv = deq(cache)
        scores = torch.bmm(q.squeeze(1), kv.transpose(1, 2)).float() * scale
        return torch.bmm(torch.softmax(scores, dim=-1).to(torch.bfloat16), kv[..., :LATENT])

    suffix = "+fp8_dequant" if fp8 else ""
    variants = sdpa_variants(make, call_sdpa, suffix)[:3]
    # no SDPA backend is built for 576-wide heads: time the one that runs and bmm + softmax, keep the faster
    v = fastest([first_working(variants), Variant("bmm" + suffix, make, run_bmm)])
    nbytes = b * L * width * (1 if fp8 else 2)
    t = time_op(v.make_inputs, v.run, nbytes)
    t["backend"] = v.backend
    t["kv_tbs"] = nbytes / (t["latency_us"] * 1e-6) / 1e12
    return t
