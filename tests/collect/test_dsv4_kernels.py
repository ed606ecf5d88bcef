"""The DeepSeek-V4 Triton kernels against torch references, in Triton's CPU interpreter (float32: the
interpreter has no bf16/fp8). The GPU check with bf16/fp8 operands is tests/collect/gpu_check_dsv4.py, run on
the device. Skipped where torch or triton is not installed (the core install has neither)."""

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'servelab[collect]')")
pytest.importorskip("triton", reason="triton is not installed")

from servelab.collect.ops import dsv4_kernels as K  # noqa: E402 - needs the torch and triton checked above


def _rel(a, b):
    return float((a - b).norm() / b.norm())


def test_sparse_attention_matches_softmax_over_the_index_list_with_sink():
    torch.manual_seed(0)
    T, H, D, N, n = 4, 20, 512, 40, 37
    q, kv, sink = torch.randn(T, H, D), torch.randn(N, D), torch.randn(H)
    idx = torch.randint(-1, N, (T, n), dtype=torch.int32)
    out = K.sparse_attention(q, kv, idx, sink, D**-0.5)
    ref = []
    for t in range(T):
        k = kv[idx[t][idx[t] >= 0].long()]
        s = torch.cat([(q[t] @ k.T) * D**-0.5, sink[:, None]], 1)
        ref.append(torch.softmax(s, 1)[:, :-1] @ k)
    assert _rel(out, torch.stack(ref)) < 1e-5


def test_indexer_logits_prefill_and_decode():
    torch.manual_seed(1)
    B, S, NH, DI, ratio = 2, 70, 4, 128, 4
    NC = S // ratio
    qi, ki, ks, w = (
        torch.randn(B, S, NH, DI),
        torch.randn(B, NC, DI),
        torch.rand(B, NC),
        torch.randn(B, S, NH),
    )
    lo = K.indexer_logits_prefill(qi, ki, ks, w, ratio)
    ref = (torch.einsum("bshd,bnd->bshn", qi, ki).relu() * w[..., None]).sum(2) * ks[:, None, :]
    visible = ((torch.arange(NC)[None, :] + 1) * ratio - 1) <= torch.arange(S)[:, None]
    mask = visible[None].expand_as(ref)
    assert torch.equal(torch.isfinite(lo), mask)  # an entry is visible once its last token has been seen
    assert _rel(lo[mask], ref[mask]) < 1e-5
    qd, wd = torch.randn(B, 16, DI), torch.randn(B, 16)
    ld = K.indexer_logits_decode(qd, ki, ks, wd, NC - 3)
    rd = ((torch.einsum("bhd,bnd->bhn", qd, ki).relu() * wd[..., None]).sum(1) * ks)[:, : NC - 3]
    assert _rel(ld, rd) < 1e-5
