"""Triton kernels for the DeepSeek-V4 attention modules (imported only on the GPU path).

- sparse_attention: each query row attends the KV rows its index list names (-1 = none), all heads sharing the
  one K=V head of width 512, plus a per-head attention sink; an online softmax, as FlashMLA's sparse kernel
  does.
- indexer_logits_prefill / indexer_logits_decode: the lightning indexer, sum_h w[t, h] * relu(q[t, h] . k[j])
x k_scale[j], with fp8 operands and fp32 logits; prefill masks compressed entries a query cannot see yet.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _sparse_attn(
    Q,
    KV,
    IDX,
    SINK,
    OUT,
    N_IDX,
    H,
    sm_scale,
    stride_qt,
    stride_qh,
    stride_it,
    stride_ot,
    stride_oh,
    BH: tl.constexpr,
    BN: tl.constexpr,
    D: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)  # T x H x 512 passes 2^31 elements at 32k tokens x 128 heads
    hb = tl.program_id(1)
    offs_h = hb * BH + tl.arange(0, BH)
    offs_d = tl.arange(0, D)
    hmask = offs_h < H
    q = tl.load(
        Q + t * stride_qt + offs_h[:, None] * stride_qh + offs_d[None, :], mask=hmask[:, None], other=0.0
    )
    m_i = tl.full([BH], float("-inf"), tl.float32)
    l_i = tl.zeros([BH], tl.float32)
    acc = tl.zeros([BH, D], tl.float32)
    for start in range(0, N_IDX, BN):
        offs_n = start + tl.arange(0, BN)
        idx = tl.load(IDX + t * stride_it + offs_n, mask=offs_n < N_IDX, other=-1)
        valid = idx >= 0
        k = tl.load(KV + idx.to(tl.int64)[:, None] * D + offs_d[None, :], mask=valid[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(k.dtype), k)
        m_i = m_new
    sink = tl.load(SINK + offs_h, mask=hmask, other=0.0)
    m_fin = tl.maximum(m_i, sink)
    scale_old = tl.exp(m_i - m_fin)
    l_i = l_i * scale_old + tl.exp(sink - m_fin)
    out = acc * (scale_old / l_i)[:, None]
    tl.store(
        OUT + t * stride_ot + offs_h[:, None] * stride_oh + offs_d[None, :],
        out.to(OUT.dtype.element_ty),
        mask=hmask[:, None],
    )


def sparse_attention(q, kv, idx, sink, sm_scale: float):
    """q [T, H, D] bf16, kv [N, D] bf16, idx [T, n] int32 (-1 = none), sink [H] fp32 -> [T, H, D]."""
    T, H, D = q.shape
    out = torch.empty_like(q)
    BH = 16 if H <= 16 else 32
    grid = (T, triton.cdiv(H, BH))
    _sparse_attn[grid](
        q,
        kv,
        idx,
        sink,
        out,
        idx.shape[1],
        H,
        sm_scale,
        q.stride(0),
        q.stride(1),
        idx.stride(0),
        out.stride(0),
        out.stride(1),
        BH=BH,
        BN=32,
        D=D,
        num_warps=4 if BH == 16 else 8,
    )
    return out


@triton.jit
def _idx_prefill(
    QI,
    KI,
    KS,
    W,
    OUT,
    S,
    NC,
    RATIO,
    NH,
    OFF,
    stride_qb,
    stride_qt,
    stride_qh,
    stride_kb,
    stride_kn,
    stride_ksb,
    stride_wb,
    stride_wt,
    stride_ob,
    stride_ot,
    BM: tl.constexpr,
    BN: tl.constexpr,
    DI: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_d = tl.arange(0, DI)
    mmask = offs_m < S
    nmask = offs_n < NC
    # blocks wholly in the future of every query of this tile only write -inf
    first_visible_end = (pid_n * BN + 1) * RATIO - 1
    heads = tl.where(first_visible_end <= OFF + pid_m * BM + BM - 1, NH, 0)
    k = tl.load(
        KI + b * stride_kb + offs_n[:, None] * stride_kn + offs_d[None, :], mask=nmask[:, None], other=0.0
    )
    acc = tl.zeros([BM, BN], tl.float32)
    for h in range(heads):
        q = tl.load(
            QI + b * stride_qb + offs_m[:, None] * stride_qt + h * stride_qh + offs_d[None, :],
            mask=mmask[:, None],
            other=0.0,
        )
        s = tl.maximum(tl.dot(q, tl.trans(k)), 0.0)
        w = tl.load(W + b * stride_wb + offs_m * stride_wt + h, mask=mmask, other=0.0).to(tl.float32)
        acc += s * w[:, None]
    ks = tl.load(KS + b * stride_ksb + offs_n, mask=nmask, other=0.0)
    acc = acc * ks[None, :]
    visible = ((offs_n[None, :] + 1) * RATIO - 1 <= OFF + offs_m[:, None]) & nmask[None, :]
    acc = tl.where(visible, acc, float("-inf"))
    tl.store(
        OUT + b * stride_ob + offs_m[:, None] * stride_ot + offs_n[None, :],
        acc,
        mask=mmask[:, None] & nmask[None, :],
    )


def indexer_logits_prefill(qi, ki, ks, w, ratio: int, offset: int = 0):
    """qi [B, S, NH, DI], ki [B, NC, DI], ks [B, NC] fp32, w [B, S, NH] -> logits [B, S, NC] fp32. The
    queries sit at positions offset .. offset + S - 1 (a chunk after `offset` cached tokens)."""
    B, S, NH, DI = qi.shape
    NC = ki.shape[1]
    out = torch.empty(B, S, NC, device=qi.device, dtype=torch.float32)
    BM, BN = 64, 64
    grid = (triton.cdiv(S, BM), triton.cdiv(NC, BN), B)
    _idx_prefill[grid](
        qi,
        ki,
        ks,
        w,
        out,
        S,
        NC,
        ratio,
        NH,
        offset,
        qi.stride(0),
        qi.stride(1),
        qi.stride(2),
        ki.stride(0),
        ki.stride(1),
        ks.stride(0),
        w.stride(0),
        w.stride(1),
        out.stride(0),
        out.stride(1),
        BM=BM,
        BN=BN,
        DI=DI,
        num_warps=4,
    )
    return out


@triton.jit
def _idx_decode(
    QI,
    KI,
    KS,
    W,
    OUT,
    NC,
    stride_qb,
    stride_qh,
    stride_kb,
    stride_kn,
    stride_ksb,
    stride_wb,
    stride_ob,
    NH: tl.constexpr,
    BN: tl.constexpr,
    DI: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    pid_n = tl.program_id(1)
    offs_h = tl.arange(0, NH)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_d = tl.arange(0, DI)
    nmask = offs_n < NC
    q = tl.load(QI + b * stride_qb + offs_h[:, None] * stride_qh + offs_d[None, :])
    k = tl.load(
        KI + b * stride_kb + offs_n[:, None] * stride_kn + offs_d[None, :], mask=nmask[:, None], other=0.0
    )
    s = tl.maximum(tl.dot(q, tl.trans(k)), 0.0)
    w = tl.load(W + b * stride_wb + offs_h).to(tl.float32)
    logits = tl.sum(s * w[:, None], 0) * tl.load(KS + b * stride_ksb + offs_n, mask=nmask, other=0.0)
    tl.store(OUT + b * stride_ob + offs_n, logits, mask=nmask)


def indexer_logits_decode(qi, ki, ks, w, nc: int):
    """qi [B, NH, DI], ki [B, >=nc, DI], ks [B, >=nc], w [B, NH] -> logits [B, nc] fp32 over the first nc
    entries."""
    B, NH, DI = qi.shape
    out = torch.empty(B, nc, device=qi.device, dtype=torch.float32)
    BN = 64
    grid = (B, triton.cdiv(nc, BN))
    _idx_decode[grid](
        qi,
        ki,
        ks,
        w,
        out,
        nc,
        qi.stride(0),
        qi.stride(1),
        ki.stride(0),
        ki.stride(1),
        ks.stride(0),
        w.stride(0),
        out.stride(0),
        NH=NH,
        BN=BN,
        DI=DI,
        num_warps=4,
    )
    return out
