"""On a GPU (not collected by pytest): the DeepSeek-V4 Triton kernels against float32 torch references, on
fresh random inputs, bf16 / fp8 operands. Prints one line per kernel with its relative error; exits 1 above
tolerance."""

import sys

import torch

from servelab.collect.ops import dsv4_kernels as K


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def main() -> int:
    torch.manual_seed(0)
    bad = 0
    T, H, D, N, n = 37, 24, 512, 900, 300
    q = torch.randn(T, H, D, device="cuda").bfloat16()
    kv = torch.randn(N, D, device="cuda").bfloat16()
    sink = torch.randn(H, device="cuda")
    idx = torch.randint(-1, N, (T, n), dtype=torch.int32, device="cuda")
    out = torch.full_like(q, float("nan"))
    out = K.sparse_attention(q, kv, idx, sink, D**-0.5)
    ref = []
    for t in range(T):
        sel = idx[t][idx[t] >= 0].long()
        k = kv[sel].float()
        s = torch.cat([(q[t].float() @ k.T) * D**-0.5, sink[:, None]], 1)
        ref.append(torch.softmax(s, 1)[:, :-1] @ k)
    e = rel(out, torch.stack(ref))
    print(f"sparse_attention rel err {e:.2e}")
    bad += not e < 1e-2
    B, S, NH, DI, ratio = 2, 300, 64, 128, 4
    NC = S // ratio
    qi = (torch.randn(B, S, NH, DI, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    ki = (torch.randn(B, NC, DI, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    ks = torch.rand(B, NC, device="cuda")
    w = torch.randn(B, S, NH, device="cuda").bfloat16()
    lo = K.indexer_logits_prefill(qi, ki, ks, w, ratio)
    r = torch.einsum("bshd,bnd->bshn", qi.float(), ki.float()).relu()
    r = (r * w.float()[..., None]).sum(2) * ks[:, None, :]
    vis = ((torch.arange(NC, device="cuda")[None, :] + 1) * ratio - 1) <= torch.arange(S, device="cuda")[
        :, None
    ]
    fin = vis[None].expand_as(r)
    same_mask = bool((torch.isfinite(lo) == fin).all())
    e = rel(lo[fin], r[fin])
    print(f"indexer_logits_prefill rel err {e:.2e}, mask ok {same_mask}")
    bad += not (e < 1e-2 and same_mask)
    qd = (torch.randn(B, NH, DI, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    wd = torch.randn(B, NH, device="cuda").bfloat16()
    ld = K.indexer_logits_decode(qd, ki, ks, wd, NC - 3)
    rd = ((torch.einsum("bhd,bnd->bhn", qd.float(), ki.float()).relu() * wd.float()[..., None]).sum(1) * ks)[
        :, : NC - 3
    ]
    e = rel(ld, rd)
    print(f"indexer_logits_decode rel err {e:.2e}")
    bad += not e < 1e-2
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
