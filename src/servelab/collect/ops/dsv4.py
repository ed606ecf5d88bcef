"""DeepSeek-V4 attention modules, whole (dsv4_{csa,hca}_{context,generation}_module), from the projections'
outputs to the attention output: nothing here is a GEMM the step graph counts separately.

CSA (ratio 4): the compressor pools overlapping 8-token windows (softmax gates per channel, learned position
bias) into one entry per 4 tokens, RMS-normalised and written to the FP8 cache; the indexer compressor does
the same for 128-wide index keys (FP8 + a scale per entry); the lightning indexer scores every visible
compressed entry (fp8, 64 heads, ReLU, per-head weights); top-k (1024 for V4-Pro, 512 for V4-Flash) entries
plus the last 128 raw tokens (sliding window) and a per-head sink form each query's attention set; attention
is MQA with one 512-wide K=V head. HCA (ratio 128): non-overlapping 128-token pooling, no indexer, dense over
all visible compressed entries plus the window. Decode updates the window ring, the compressor state and the
caches, then does the same for one query per sequence.

Kernels are servelab's own Triton kernels (dsv4_kernels.py), not FlashMLA / DeepGEMM: their rows carry
backend="servelab_triton". Known departures, kept on purpose and reported: the attention reads compressed
entries as bf16 (1024 B, where the engines read 584 B of fp8 + bf16 rope), top-k is torch.topk, and the
compressors emit an entry every decode step (the engines: every 4th / 128th step).
"""

import torch

from servelab.collect.ops import common
from servelab.collect.ops.common import Unsupported, rand, rand_fp8, rand_scale
from servelab.collect.ops.dsv4_kernels import indexer_logits_decode, indexer_logits_prefill, sparse_attention
from servelab.collect.timing import time_op

D, ROPE, WINDOW = 512, 64, 128
INDEX_HEADS, INDEX_DIM = 64, 128
TOPK = {128: 1024, 64: 512}
RATIO = {"csa": 4, "hca": 128}


def _family(op: str) -> str:
    return "csa" if "_csa_" in op else "hca"


def _topk(native_heads: int) -> int:
    if native_heads not in TOPK:
        raise Unsupported(f"no DeepSeek-V4 model has {native_heads} native heads (known: {sorted(TOPK)})")
    return TOPK[native_heads]


def _rms(x, eps: float = 1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(torch.bfloat16)


def _pool(values, gates, bias):
    """Softmax-gated pooling over dim -2 (the tokens of one compressed entry), per channel."""
    w = torch.softmax(gates.float() + bias.float(), dim=-2)
    return (w * values.float()).sum(-2)


def compress(vals, gates, bias, ratio: int, overlap: bool):
    """vals, gates [B, S, C] -> entries [B, S // ratio, C] (fp32). overlap: each entry also pools the previous
    ratio tokens (CSA's 2 x ratio window); bias [window, C]."""
    B, S, C = vals.shape
    n = S // ratio
    v = vals[:, : n * ratio].view(B, n, ratio, C)
    g = gates[:, : n * ratio].view(B, n, ratio, C)
    if overlap:
        pv = torch.cat([torch.zeros_like(v[:, :1]), v[:, :-1]], dim=1)
        pg = torch.cat([torch.full_like(g[:, :1], -1e4), g[:, :-1]], dim=1)
        v, g = torch.cat([pv, v], dim=2), torch.cat([pg, g], dim=2)
    return _pool(v, g, bias)


def _quant_fp8(x):
    """Per-row fp8 with an fp32 scale, as the caches store it."""
    scale = x.abs().amax(-1, keepdim=True).clamp_min(1e-6) / 448.0
    return (x / scale).to(torch.float8_e4m3fn), scale.squeeze(-1)


def _window_index(T_per_seq: int, batch: int, base):
    """[batch * T, 128] raw-token indices of each query's window (newest first), -1 before the sequence
    start."""
    t = (
        torch.arange(T_per_seq, device=common.DEVICE)[:, None]
        - torch.arange(WINDOW, device=common.DEVICE)[None, :]
    )
    idx = torch.where(t >= 0, t, -1)
    seq_base = (torch.arange(batch, device=common.DEVICE) * T_per_seq)[:, None, None]
    return torch.where(idx[None] >= 0, idx[None] + seq_base + base, -1).view(batch * T_per_seq, WINDOW)


def context_module(key):
    """(make_inputs, run, bytes_per_set) for one prefill of key.batch sequences of key.seq tokens."""
    fam = _family(key.op)
    B, S, H = key.batch, key.seq, key.heads
    ratio, overlap = RATIO[fam], fam == "csa"
    topk = _topk(key.native_heads)
    nc = S // ratio
    window = 2 * ratio if overlap else ratio
    bias = rand(window, D, scale=0.1)
    ibias = rand(window, INDEX_DIM, scale=0.1)
    sink = torch.randn(H, device=common.DEVICE, dtype=torch.float32)
    scale = D**-0.5
    # the HCA attention set is every visible compressed entry; the CSA one the indexer's top-k
    if fam == "hca":
        vis = (torch.arange(S, device=common.DEVICE)[:, None] + 1) // ratio > torch.arange(
            max(nc, 1), device=common.DEVICE
        )[None]
        hca_idx = torch.where(vis, torch.arange(max(nc, 1), device=common.DEVICE)[None], -1)[:, :nc]

    def make():
        x = {"q": rand(B * S, H, D), "kv": rand(B, S, D), "cv": rand(B, S, D), "cg": rand(B, S, D)}
        if overlap:
            x.update(
                iq=rand_fp8(B, S, INDEX_HEADS, INDEX_DIM),
                iw=rand(B, S, INDEX_HEADS, scale=0.1),
                iv=rand(B, S, INDEX_DIM),
                ig=rand(B, S, INDEX_DIM),
            )
        return (x,)

    def run(x):
        entries = _rms(compress(x["cv"], x["cg"], bias, ratio, overlap))  # [B, nc, D]
        cache, _ = _quant_fp8(entries.float())  # the FP8 cache write (read back below as bf16)
        pool = torch.cat([entries.reshape(B * nc, D), x["kv"].reshape(B * S, D)])
        comp_base = (torch.arange(B, device=common.DEVICE) * nc)[:, None, None]
        if overlap:
            ik, iks = _quant_fp8(_rms(compress(x["iv"], x["ig"], ibias, ratio, True)).float())
            logits = indexer_logits_prefill(x["iq"], ik, iks, x["iw"], ratio)  # [B, S, nc]
            k = min(topk, nc)
            if k:
                top = logits.topk(k, dim=-1)
                sel = torch.where(top.values > float("-inf"), top.indices + comp_base, -1)
            else:
                sel = torch.empty(B, S, 0, dtype=torch.int64, device=common.DEVICE)
        else:
            sel = torch.where(hca_idx[None] >= 0, hca_idx[None] + comp_base, -1)
        win = _window_index(S, B, B * nc)
        idx = torch.cat([sel.reshape(B * S, -1), win], dim=1).to(torch.int32)
        out = sparse_attention(x["q"], pool, idx, sink, scale)
        return out, cache

    per_set = (
        B
        * S
        * (
            H * D * 2
            + 3 * D * 2
            + (INDEX_HEADS * INDEX_DIM + INDEX_HEADS * 2 + 2 * INDEX_DIM * 2 if overlap else 0)
        )
    )
    return make, run, per_set


def indexer_decode_inputs(B: int, window: int, nc: int) -> dict:
    """A decode step's lightning-indexer inputs for B sequences with nc compressed entries: the query and
    weights, the new token's index-key inputs, the compressor's window state, and the FP8 index-key cache
    with its scales (the new entry's slot included)."""
    return {
        "iq": rand_fp8(B, INDEX_HEADS, INDEX_DIM),
        "iw": rand(B, INDEX_HEADS, scale=0.1),
        "iv": rand(B, INDEX_DIM),
        "ig": rand(B, INDEX_DIM),
        "istate_v": rand(B, window, INDEX_DIM),
        "istate_g": rand(B, window, INDEX_DIM),
        "ik": rand_fp8(B, nc + 1, INDEX_DIM),
        "iks": rand_scale(B, nc + 1),
    }


def generation_module(key):
    """(make_inputs, run, bytes_per_set) for one decode step of key.batch sequences with key.kv_len cached."""
    fam = _family(key.op)
    B, L, H = key.batch, key.kv_len, key.heads
    ratio, overlap = RATIO[fam], fam == "csa"
    topk = _topk(key.native_heads)
    nc = L // ratio
    window = 2 * ratio if overlap else ratio
    bias = rand(window, D, scale=0.1)
    ibias = rand(window, INDEX_DIM, scale=0.1)
    sink = torch.randn(H, device=common.DEVICE, dtype=torch.float32)
    scale = D**-0.5
    slot = L % WINDOW
    cslot = nc  # the entry the compressor emits this step (the slot after the nc cached ones)
    bidx = torch.arange(B, device=common.DEVICE)
    if fam == "hca":
        hca_idx = (bidx[:, None] * (nc + 1) + torch.arange(nc, device=common.DEVICE)[None]).to(torch.int32)

    def make():
        x = {
            "q": rand(B, H, D),
            "kv": rand(B, D),
            "cv": rand(B, D),
            "cg": rand(B, D),
            "state_v": rand(B, window, D),
            "state_g": rand(B, window, D),
            "comp": rand(B, nc + 1, D),
            "win": rand(B, WINDOW, D),
        }
        if overlap:
            x.update(indexer_decode_inputs(B, window, nc))
        return (x,)

    def run(x):
        x["win"][:, slot] = x["kv"]  # sliding-window ring
        st = slot % window
        x["state_v"][:, st] = x["cv"]
        x["state_g"][:, st] = x["cg"]
        x["comp"][:, cslot] = _rms(_pool(x["state_v"], x["state_g"], bias))
        pool = torch.cat([x["comp"].view(B * (nc + 1), D), x["win"].view(B * WINDOW, D)])
        win_idx = (
            B * (nc + 1) + bidx[:, None] * WINDOW + torch.arange(WINDOW, device=common.DEVICE)[None]
        ).to(torch.int32)
        if overlap:
            x["istate_v"][:, st] = x["iv"]
            x["istate_g"][:, st] = x["ig"]
            q8, s8 = _quant_fp8(_rms(_pool(x["istate_v"], x["istate_g"], ibias)).float())
            x["ik"][:, cslot] = q8
            x["iks"][:, cslot] = s8
            k = min(topk, nc)
            if k:
                logits = indexer_logits_decode(x["iq"], x["ik"], x["iks"], x["iw"], nc)
                sel = (logits.topk(k, dim=-1).indices + bidx[:, None] * (nc + 1)).to(torch.int32)
                idx = torch.cat([sel, win_idx], dim=1)
            else:
                idx = win_idx
        else:
            idx = torch.cat([hca_idx, win_idx], dim=1)
        return sparse_attention(x["q"], pool, idx, sink, scale)

    entries_read = (min(topk, nc) if overlap else nc) + WINDOW
    per_set = B * ((nc + 1) * D * 2 + WINDOW * D * 2 + ((nc + 1) * (INDEX_DIM + 4) if overlap else 0))
    del entries_read
    return make, run, per_set


def bench_context(key) -> dict:
    make, run, nbytes = context_module(key)
    t = time_op(make, run, nbytes)
    t["backend"] = "servelab_triton"
    return t


def bench_generation(key) -> dict:
    make, run, nbytes = generation_module(key)
    t = time_op(make, run, nbytes)
    t["backend"] = "servelab_triton"
    return t
