"""MoE expert compute on one rank through torch._grouped_mm: gate_up GEMM, SiLU-and-multiply, down GEMM over
the tokens routed to this rank's experts (already permuted; routing and all-to-all are separate ops).

Routing (key.distribution):
- uniform: each token draws topk distinct experts uniformly at random (seeded), as a random router does: at
small batches only some experts are touched, so only their weights are read;
- power_law: expert popularity ~ rank^-1.2 (experts shuffled), each token draws topk distinct experts by
  Gumbel top-k.
In both, the rank with the most assignments is measured (the straggler sets the step time).
Each rotating input set moves the touched experts to other weight rows, so a replay never finds the last
replay's weights in L2. fp8 experts use row-wise scales (torch._scaled_grouped_mm); DeepSeek's 128x128 weight
blocks have no grouped kernel in torch, so fp8_block is measured with that row-wise kernel and the row says
so.
"""

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from servelab.collect.ops.common import Unsupported, rand, rand_fp8, rand_scale
from servelab.collect.timing import time_op

POWER_LAW_ALPHA = 1.2
SEED = 1234


def local_counts(key) -> tuple[list[int], float]:
    """Assignments per local expert on the measured rank, and that rank's share relative to the mean rank."""
    local = key.experts // key.ep
    if key.distribution not in ("uniform", "power_law"):
        raise Unsupported(f"routing distribution {key.distribution!r}")
    g = torch.Generator(device="cpu").manual_seed(SEED)
    alpha = POWER_LAW_ALPHA if key.distribution == "power_law" else 0.0
    popularity = torch.arange(1, key.experts + 1, dtype=torch.float64) ** -alpha
    popularity = popularity[torch.randperm(key.experts, generator=g)]
    logp = popularity.log().float()
    hits = torch.zeros(key.experts, dtype=torch.int64)
    for start in range(0, key.tokens, 16384):  # Gumbel top-k: topk distinct experts per token, by popularity
        n = min(16384, key.tokens - start)
        u = torch.rand(n, key.experts, generator=g).clamp_min(1e-12)
        chosen = (logp - (-u.log()).log()).topk(key.topk, dim=1).indices
        hits += torch.bincount(chosen.flatten(), minlength=key.experts)
    per_rank = hits.view(key.ep, local)
    busiest = int(per_rank.sum(1).argmax())
    counts = per_rank[busiest].tolist()
    mean = float(per_rank.sum()) / key.ep
    return counts, (sum(counts) / mean if mean else 1.0)


def bench(key) -> dict:
    if key.experts % key.ep:
        raise Unsupported(f"{key.experts} experts do not divide over ep {key.ep}")
    counts, share = local_counts(key)
    E, H, inter = len(counts), key.hidden, key.inter
    A = sum(counts)
    if A == 0:
        raise Unsupported("no tokens reach the measured rank")
    fp8 = key.dtype in ("fp8", "fp8_block")
    if key.dtype not in ("bf16", "fp8", "fp8_block"):
        raise Unsupported(f"expert dtype {key.dtype} has no grouped kernel on this GPU")
    # weights stored [E, N, K] and passed transposed, the layout the grouped kernels want
    if fp8:
        w1, w2 = rand_fp8(E, 2 * inter, H), rand_fp8(E, H, inter)
        s1, s2 = rand_scale(E, 2 * inter), rand_scale(E, H)
    else:
        w1, w2 = rand(E, 2 * inter, H, scale=0.05), rand(E, H, inter, scale=0.05)
    touched = sum(1 for c in counts if c)
    wbytes = (1 if fp8 else 2) * 3 * H * inter
    g = torch.Generator(device="cpu").manual_seed(SEED)

    def make():
        perm = torch.randperm(E, generator=g)  # rotate which weight rows the routed tokens touch
        rotated = [0] * E
        for i, c in enumerate(counts):
            rotated[int(perm[i])] = c
        offs = torch.tensor(rotated, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
        x = rand_fp8(A, H) if fp8 else rand(A, H)
        return (x, offs, rand_scale(A)) if fp8 else (x, offs)

    run: Callable[..., Any]  # the variants take different inputs (fp8 adds the activations' scales)
    if fp8:

        def run_fp8(x, offs, sx):
            h = torch._scaled_grouped_mm(
                x, w1.transpose(-2, -1), sx, s1, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True
            )
            gate, up = h.chunk(2, dim=-1)
            a = (F.silu(gate) * up).to(torch.float8_e4m3fn)
            return torch._scaled_grouped_mm(
                a, w2.transpose(-2, -1), sx, s2, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True
            )

        run = run_fp8
        backend = "scaled_grouped_mm_rowwise" + (
            "(stand-in for 128x128 blocks)" if key.dtype == "fp8_block" else ""
        )
    else:

        def run_bf16(x, offs):
            h = torch._grouped_mm(x, w1.transpose(-2, -1), offs=offs)
            gate, up = h.chunk(2, dim=-1)
            return torch._grouped_mm(F.silu(gate) * up, w2.transpose(-2, -1), offs=offs)

        run = run_bf16

        backend = "grouped_mm"
    t = time_op(make, run, touched * wbytes + A * H * 4)
    t.update(
        backend=backend,
        routing=key.distribution,
        local_tokens=A,
        touched_experts=touched,
        rank_share=round(share, 4),
        max_expert_tokens=max(counts),
    )
    t["tflops"] = 6.0 * A * H * inter / (t["latency_us"] * 1e-6) / 1e12
    return t
