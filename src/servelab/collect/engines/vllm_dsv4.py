"""DeepSeek-V4 attention modules (dsv4_{csa,hca}_{context,generation}_module) with vLLM's attention kernel:
FlashMLA's sparse prefill and sparse decode from the _flashmla_C library of the vLLM wheel, called as
DeepseekV4FlashMLAAttention (models/deepseek_v4/nvidia/flashmla.py of vLLM 0.25) calls them.

What a row times, per key (the module of servelab's torch table, collect/ops/dsv4.py, with the attention
swapped for vLLM's):
- the compressor of the new tokens (softmax-gated pooling, RMSNorm, FP8 quantisation) and, for CSA, the
  lightning indexer (index-key compressor, fp8 logits over every visible compressed entry, top-k): servelab's
  Triton / torch kernels, because vLLM's (CuTe DSL, DeepGEMM fp8_fp4_mqa_logits / paged_mqa_logits, _C
  persistent_topk) do not load without their packages;
- context: the gather of the compressed cache (every entry of the request, fp8_ds_mla bytes -> bf16, a torch
  stand-in for vLLM's Triton dequantize_and_gather_k_cache) and the window, the per-query index lists (top-k
  or every visible compressed entry, then the window; left-packed with lengths, as combine_topk_swa_indices
  makes them), then sparse_prefill_fwd over the new tokens with the sink; prompts longer than vLLM's
  8,192-token chunk are timed a chunk at a time (plans.dsv4_pieces);
- generation: the window and compressed caches in vLLM's fp8_ds_mla layout (584 B a token, 64 a block), the
  new token's cache write, the indexer's top-k mapped to cache slots (CSA) or every compressed entry (HCA,
  vLLM's C128A metadata), then sparse_decode_fwd with the window as the main cache and the compressed
  entries as the extra cache.
Query heads are padded to 64 or 128 as vLLM pads them for FlashMLA (sink -inf on the padding). Cache bytes
are random but finite (fp8 and bf16 bytes of small magnitude, scale bytes 127 = 1.0). Extras: attn_us (the
FlashMLA call alone, with fixed indices; keys timed in one piece), and for chunked prompts the chunks and
each timed chunk's latency.
"""

import torch

from servelab.collect.engines.plans import dsv4_pieces
from servelab.collect.ops import common
from servelab.collect.ops.common import Unsupported, rand, rand_fp8, rand_scale
from servelab.collect.ops.dsv4 import (
    INDEX_DIM,
    INDEX_HEADS,
    RATIO,
    WINDOW,
    D,
    _family,
    _pool,
    _quant_fp8,
    _rms,
    _topk,
    compress,
    indexer_decode_inputs,
)
from servelab.collect.ops.dsv4_kernels import indexer_logits_decode, indexer_logits_prefill
from servelab.collect.timing import time_op

PAGE = 64  # tokens (compressed entries) per cache block
TOKEN_BYTES = 584  # fp8_ds_mla for DeepSeek-V4: 448 fp8 NoPE + 64 bf16 RoPE + 8 UE8M0 scale bytes
DATA_BYTES, NOPE = 576, 448
BACKEND = "vllm FlashMLA sparse (_flashmla_C) + servelab compressor / indexer / top-k"


def padded_heads(heads: int) -> int:
    """DeepseekV4FlashMLAAttention.get_padded_num_q_heads: FlashMLA's FP8 kernels take 64 or 128 heads."""
    if heads > 128:
        raise Unsupported(f"FlashMLA takes at most 128 query heads, not {heads}")
    return 64 if heads <= 64 else 128


def _flash():
    ops = torch.ops._flashmla_C
    for name in ("sparse_prefill_fwd", "sparse_decode_fwd"):
        if not hasattr(ops, name):
            raise Unsupported(
                f"torch.ops._flashmla_C has no {name}: vLLM's _flashmla_C library is not loaded"
            )
    return ops


def _round_up(x: int, y: int) -> int:
    return (x + y - 1) // y * y


def fp8_cache(blocks: int) -> torch.Tensor:
    """(blocks, 64, 584) uint8 in fp8_ds_mla's block layout (64 x 576 token bytes, then 64 x 8 scale bytes):
    small finite fp8 / bf16 bytes, every scale 2^0."""
    cache = torch.randint(0x20, 0x3C, (blocks, PAGE, TOKEN_BYTES), dtype=torch.uint8, device=common.DEVICE)
    cache.view(blocks, -1)[:, PAGE * DATA_BYTES :] = 127
    return cache


def dequant(cache: torch.Tensor) -> torch.Tensor:
    """Every token of the cache as bf16 [blocks x 64, 512]: fp8 NoPE x its 64-value block scales, then the
    bf16 RoPE (the work of vLLM's dequantize_and_gather_k_cache, in torch)."""
    blocks = cache.shape[0]
    flat = cache.view(blocks, -1)
    data = flat[:, : PAGE * DATA_BYTES].reshape(blocks * PAGE, DATA_BYTES)
    scales = flat[:, PAGE * DATA_BYTES :].reshape(blocks * PAGE, 8)[:, : NOPE // 64]
    nope = data[:, :NOPE].view(torch.float8_e4m3fn).to(torch.bfloat16)
    nope = nope * torch.exp2(scales.float() - 127).repeat_interleave(64, 1).to(torch.bfloat16)
    rope = data[:, NOPE:].contiguous().view(torch.bfloat16)
    return torch.cat([nope, rope], dim=1)


def _sink(heads: int, padded: int) -> torch.Tensor:
    sink = torch.full((padded,), float("-inf"), device=common.DEVICE, dtype=torch.float32)
    sink[:heads] = torch.randn(heads, device=common.DEVICE)
    return sink


def context_chunk(key, new: int, past: int):
    """(make_inputs, run, attend, bytes_per_set) for key.batch prompts' chunk of `new` tokens after `past`."""
    flash = _flash()
    fam = _family(key.op)
    B, C, H = key.batch, new, key.heads
    Hp = padded_heads(H)
    ratio, csa = RATIO[fam], fam == "csa"
    topk = _topk(key.native_heads)
    nct = (past + C) // ratio  # compressed entries after this chunk
    cb = max(1, -(-nct // PAGE))  # compressed cache blocks per prompt
    wp = min(past, WINDOW)  # window tokens cached before the chunk
    k = min(topk, nct) if csa else 0
    # FlashMLA's SM90 sparse prefill reads the index lists in pairs of 64-entry blocks (params.topk % 128)
    width = _round_up((k if csa else nct) + WINDOW, 128)
    window = 2 * ratio if csa else ratio
    bias, ibias = rand(window, D, scale=0.1), rand(window, INDEX_DIM, scale=0.1)
    sink = _sink(H, Hp)
    scale = D**-0.5
    dev = common.DEVICE
    pos = past + torch.arange(C, device=dev)
    vis = (pos + 1) // ratio
    wc = torch.clamp(pos + 1, max=WINDOW)
    win_start = (pos - wc + 1) - (past - wp)  # the first window token, in the chunk's window pool
    slots = torch.arange(width, device=dev)
    comp_base = (torch.arange(B, device=dev) * cb * PAGE)[:, None, None]
    win_base = cb * PAGE * B + (torch.arange(B, device=dev) * (wp + C))[:, None, None]

    def indices(sel):
        """[B * C, 1, width] int32 left-packed (compressed entries, then the window) and [B * C] lengths."""
        cc = torch.clamp(vis, max=k) if csa else vis
        cc = cc[None, :, None].expand(B, C, 1)
        if csa:
            comp = torch.gather(sel, 2, torch.clamp(slots, max=max(k - 1, 0))[None, None].expand(B, C, width))
        else:
            comp = slots[None, None].expand(B, C, width)
        win = win_start[None, :, None] + (slots[None, None] - cc)
        idx = torch.where(
            slots < cc, comp_base + comp, torch.where(slots < cc + wc[None, :, None], win_base + win, -1)
        )
        lens = (cc[..., 0] + wc[None]).reshape(B * C)
        return idx.reshape(B * C, 1, width).to(torch.int32), lens.to(torch.int32)

    def make():
        x = {
            "q": rand(B * C, Hp, D),
            "kv": rand(B, C, D),
            "cv": rand(B, C, D),
            "cg": rand(B, C, D),
            "prev": rand(B, wp, D),
            "cache": fp8_cache(B * cb),
            "sel": torch.randint(0, max(nct, 1), (B, C, max(k, 1)), device=dev),
        }
        if csa:
            x.update(
                iq=rand_fp8(B, C, INDEX_HEADS, INDEX_DIM),
                iw=rand(B, C, INDEX_HEADS, scale=0.1),
                iv=rand(B, C, INDEX_DIM),
                ig=rand(B, C, INDEX_DIM),
                ik=rand_fp8(B, max(nct, 1), INDEX_DIM),
                iks=rand_scale(B, max(nct, 1)),
            )
        return (x,)

    def pool(x):
        win = torch.cat([x["prev"], x["kv"]], dim=1).reshape(B * (wp + C), D)
        return torch.cat([dequant(x["cache"]), win]).view(-1, 1, D)

    def run(x):
        _quant_fp8(_rms(compress(x["cv"], x["cg"], bias, ratio, csa)).float())  # the new entries' cache write
        sel = x["sel"]
        if csa:
            ik, iks = _quant_fp8(_rms(compress(x["iv"], x["ig"], ibias, ratio, True)).float())
            first = past // ratio
            x["ik"][:, first : first + ik.shape[1]] = ik
            x["iks"][:, first : first + ik.shape[1]] = iks
            if k:
                logits = indexer_logits_prefill(
                    x["iq"], x["ik"][:, :nct], x["iks"][:, :nct], x["iw"], ratio, past
                )
                sel = logits.topk(k, dim=-1).indices
        idx, lens = indices(sel)
        return flash.sparse_prefill_fwd(x["q"], pool(x), idx, scale, 512, sink, lens, None)[0]

    def attend(x):
        idx, lens = indices(x["sel"])
        return flash.sparse_prefill_fwd(x["q"], pool(x), idx, scale, 512, sink, lens, None)[0]

    per_set = B * C * (Hp * D * 2 + 3 * D * 2) + B * cb * PAGE * TOKEN_BYTES
    if csa:
        per_set += (
            B * C * (INDEX_HEADS * INDEX_DIM + INDEX_HEADS * 2 + 2 * INDEX_DIM * 2) + B * nct * INDEX_DIM
        )
    return make, run, attend, per_set


def generation_step(key):
    """(make_inputs, run, attend, bytes_per_set) for one decode step of key.batch sequences."""
    flash = _flash()
    fam = _family(key.op)
    B, L, H = key.batch, key.kv_len, key.heads
    Hp = padded_heads(H)
    ratio, csa = RATIO[fam], fam == "csa"
    topk = _topk(key.native_heads)
    nc = L // ratio
    k = min(topk, nc) if csa else nc
    width = _round_up(max(k, 1), 64)
    cb = -(-(nc + 1) // PAGE)  # compressed cache blocks per sequence (the new entry included)
    window = 2 * ratio if csa else ratio
    bias, ibias = rand(window, D, scale=0.1), rand(window, INDEX_DIM, scale=0.1)
    sink = _sink(H, Hp)
    scale = D**-0.5
    dev = common.DEVICE
    b = torch.arange(B, device=dev)
    swa_idx = (
        (b[:, None] * 2 * PAGE + torch.arange(WINDOW, device=dev)[None]).to(torch.int32).view(B, 1, WINDOW)
    )
    swa_len = torch.full((B,), min(L + 1, WINDOW), dtype=torch.int32, device=dev)
    slots = torch.arange(width, device=dev)
    all_idx = torch.where(slots[None] < nc, b[:, None] * cb * PAGE + slots[None], -1).to(torch.int32)
    extra_len = torch.full((B,), k, dtype=torch.int32, device=dev)
    slot = L % WINDOW
    entry_row, entry_off = b * cb + nc // PAGE, (nc % PAGE) * DATA_BYTES
    sched: dict = {}

    def make():
        x = {
            "q": rand(B, 1, Hp, D),
            "kv": rand(B, D),
            "cv": rand(B, D),
            "cg": rand(B, D),
            "state_v": rand(B, window, D),
            "state_g": rand(B, window, D),
            "swa": fp8_cache(B * 2),
            "comp": fp8_cache(B * cb),
            "sel": torch.randint(0, max(nc, 1), (B, max(k, 1)), device=dev),
        }
        if csa:
            x.update(indexer_decode_inputs(B, window, nc))
        return (x,)

    def decode(x, extra_idx):
        out, _, meta, splits = flash.sparse_decode_fwd(
            x["q"], x["swa"].unsqueeze(-2), swa_idx, swa_len, sink, sched.get("meta"), sched.get("splits"),
            x["comp"].unsqueeze(-2), extra_idx, extra_len, 512, scale, None,
        )  # fmt: skip
        sched["meta"], sched["splits"] = meta, splits
        return out

    def run(x):
        swa = x["swa"].view(B * 2, -1)
        q8, _ = _quant_fp8(x["kv"].float())  # the new token's window-cache write
        swa[b * 2 + slot // PAGE, (slot % PAGE) * DATA_BYTES : (slot % PAGE) * DATA_BYTES + NOPE] = q8[
            :, :NOPE
        ].view(torch.uint8)
        st = slot % window
        x["state_v"][:, st] = x["cv"]
        x["state_g"][:, st] = x["cg"]
        e8, _ = _quant_fp8(_rms(_pool(x["state_v"], x["state_g"], bias)).float())  # the compressor's entry
        x["comp"].view(B * cb, -1)[entry_row, entry_off : entry_off + NOPE] = e8[:, :NOPE].view(torch.uint8)
        if csa:
            x["istate_v"][:, st] = x["iv"]
            x["istate_g"][:, st] = x["ig"]
            i8, s8 = _quant_fp8(_rms(_pool(x["istate_v"], x["istate_g"], ibias)).float())
            x["ik"][:, nc] = i8
            x["iks"][:, nc] = s8
            if k:
                logits = indexer_logits_decode(x["iq"], x["ik"], x["iks"], x["iw"], nc)
                sel = logits.topk(k, dim=-1).indices
                extra = torch.where(slots[None] < k, b[:, None] * cb * PAGE + sel.gather(1, torch.clamp(
                    slots, max=k - 1)[None].expand(B, width)), -1)  # fmt: skip
                return decode(x, extra.to(torch.int32).view(B, 1, width))
        return decode(x, all_idx.view(B, 1, width))

    def attend(x):
        if csa and k:
            extra = torch.where(slots[None] < k, b[:, None] * cb * PAGE + x["sel"].gather(1, torch.clamp(
                slots, max=k - 1)[None].expand(B, width)), -1)  # fmt: skip
            return decode(x, extra.to(torch.int32).view(B, 1, width))
        return decode(x, all_idx.view(B, 1, width))

    per_set = B * (Hp * D * 2 + (cb + 2) * PAGE * TOKEN_BYTES + 2 * window * D * 2)
    if csa:
        per_set += B * (nc + 1) * (INDEX_DIM + 4)
    return make, run, attend, per_set


def bench(key, files=None) -> dict:
    if key.op.endswith("_context_module"):
        return _context(key)
    make, run, attend, nbytes = generation_step(key)
    t = time_op(make, run, nbytes)
    a = time_op(make, attend, nbytes)
    return {**t, "backend": BACKEND, "attn_us": a["latency_us"], "padded_heads": padded_heads(key.heads)}


def _context(key) -> dict:
    pieces = dsv4_pieces(key)
    if len(pieces) == 1:
        make, run, attend, nbytes = context_chunk(key, key.seq, 0)
        t = time_op(make, run, nbytes)
        a = time_op(make, attend, nbytes)
        return {**t, "backend": BACKEND, "attn_us": a["latency_us"], "padded_heads": padded_heads(key.heads)}
    timed = []
    for new, past, weight in pieces:
        make, run, _, nbytes = context_chunk(key, new, past)
        timed.append((time_op(make, run, nbytes), weight, new, past))
        torch.cuda.empty_cache()
    total = {c: sum(t[c] * w for t, w, _, _ in timed) for c in ("latency_us", "p10_us", "p90_us")}
    return {
        **total,
        "reps": min(t["reps"] for t, *_ in timed),
        "inner": 1,
        "timing": "graph" if all(t["timing"] == "graph" for t, *_ in timed) else "eager",
        "backend": BACKEND,
        "padded_heads": padded_heads(key.heads),
        "chunks": [
            {"new": new, "past": past, "weight": w, "latency_us": round(t["latency_us"], 3)}
            for t, w, new, past in timed
        ],
        "timing_note": "prompt prefilled in vLLM's 8,192-token chunks: the timed chunks' latencies, weighted "
        "by how many chunks each stands for (linear in the chunk index between them)",
    }
