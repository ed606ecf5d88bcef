"""Time vLLM's DeepGEMM block-FP8 MoE path (`deep_gemm_moe_fp8`) on this GPU, without installing vLLM.

With DeepGEMM installed (vLLM's docker images install it), vLLM 0.12 on Hopper below TP8 runs block-FP8 MoE
layers through `DeepGemmExperts` for every batch size: the FP8 backend is DEEPGEMM (VLLM_USE_DEEP_GEMM and
VLLM_MOE_USE_DEEP_GEMM default on, off by default only at TP >= 8), and because VLLM_USE_DEEP_GEMM_E8M0 also
defaults on, `fused_experts` takes DeepGEMM without checking the shape (M >= 128, N > 512) it checks
otherwise. DeepGemmExperts sizes its work without a device-to-host copy: M_sum = round_up(tokens x top-k +
experts x 127, 128) rows. It permutes the FP8 activations into 128-row blocks per expert (the rest of M_sum
keeps expert id 0, as vLLM zero-fills the ids, so DeepGEMM computes those rows too), runs DeepGEMM's
`m_grouped_fp8_gemm_nt_contiguous` for gate-up, SiLU-and-mul with per-token-group FP8 quantisation, the second
grouped GEMM for down, and gathers the top-k rows back with their routing weights.

What runs here, per (TP, tokens), each timed with triton.testing.do_bench (L2 flushed before every launch):
- gate_up, down: DeepGEMM's grouped GEMM on the M_sum rows as vLLM lays them out (vLLM's own calls);
- permute, unpermute: vLLM's Triton `ep_scatter` / `ep_gather` kernels, read from vLLM's deep_gemm_utils.py
  as text (the per-expert token count before them, a Triton kernel in vLLM, is a torch scatter_add here);
- act_quant: SiLU-and-mul and per-token-group FP8 quantisation (UE8M0 scales, column-major) in ONE Triton
  kernel written here, where vLLM runs two CUDA kernels (silu_and_mul, per_token_group_fp8_quant): it leaves
  out one write and read of the bf16 activation (M_sum x N x 2 bytes each way);
- moe: the whole path launched eagerly, input quantisation included (its time includes Python launch costs);
- moe_graph: the same captured in a CUDA graph and replayed, as vLLM's decode steps run it.

Routing is uniform: each token picks top-k distinct experts at random.

    python scripts/time_vllm_deepgemm_moe.py --vllm DIR/vllm --out moe_deepgemm.csv \
        [--shapes 2:1 4:1 2:2 4:4] [--tokens 1 2 4 ...] [--budget-s 400] [--warmup-ms 100]

Needs torch, triton and deep_gemm importable (DeepGEMM built for this GPU; its extension links torch's libc10
without a run path, so put torch's lib/ directory on LD_LIBRARY_PATH); DeepGEMM's and vLLM's code is not
part of servelab: point --vllm at an unpacked vLLM package (the `vllm/` directory of its wheel).
"""

import argparse
import ast
import csv
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import deep_gemm
import torch
import triton
import triton.language as tl
from kernel_timing import bench

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
GROUP = 128  # the checkpoints' quantisation block and DeepGEMM's M/K alignment
# Qwen/Qwen3-235B-A22B-FP8 config.json: experts, top-k, hidden, moe intermediate before the TP split
EXPERTS, TOPK, HIDDEN, INTER = 128, 8, 4096, 1536
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
STAGES = ("permute", "gate_up", "act_quant", "down", "unpermute", "moe", "moe_graph")


def load_vllm_helpers(vllm_dir: Path) -> dict:
    """vLLM's permute/unpermute Triton kernels and M_sum rule, taken from deep_gemm_utils.py as text."""
    path = vllm_dir / "model_executor" / "layers" / "fused_moe" / "deep_gemm_utils.py"
    if not path.exists():
        sys.exit(f"{path}: missing; --vllm must be an unpacked vllm/ package that has DeepGEMM MoE")
    names = {
        "compute_aligned_M", "apply_expert_map", "round_up_128", "_fwd_kernel_ep_scatter_1",
        "_fwd_kernel_ep_scatter_2", "ep_scatter", "_fwd_kernel_ep_gather", "ep_gather",
    }  # fmt: skip
    ns: dict = {
        "__name__": "vllm_deep_gemm_utils_source",
        "torch": torch,
        "triton": triton,
        "tl": tl,
        "round_up": lambda x, y: (x + y - 1) // y * y,
        "mk": SimpleNamespace(ExpertTokensMetadata=object),  # only named in annotations
    }
    tree = ast.parse(path.read_text())
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    missing = names - {n.name for n in nodes}
    if missing:
        sys.exit(f"{path}: no {sorted(missing)}; not a vLLM DeepGEMM-MoE source this script knows")
    # compiled under the real file name with the original line numbers, so triton.jit reads the source
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec"), ns)
    return ns


@triton.jit
def _act_quant_kernel(
    x_ptr, q_ptr, s_ptr, rows, n, SILU_MUL: tl.constexpr, COL_MAJOR: tl.constexpr, GROUP: tl.constexpr
):
    """One row's 128-column group: optional SiLU(gate) * up, then FP8 with a power-of-two (UE8M0) scale."""
    row = tl.program_id(0).to(tl.int64)
    grp = tl.program_id(1)
    cols = grp * GROUP + tl.arange(0, GROUP)
    if SILU_MUL:
        gate = tl.load(x_ptr + row * 2 * n + cols).to(tl.float32)
        up = tl.load(x_ptr + row * 2 * n + n + cols).to(tl.float32)
        v = gate / (1.0 + tl.exp(-gate)) * up
    else:
        v = tl.load(x_ptr + row * n + cols).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(v)), 1e-10)
    scale = tl.exp2(tl.ceil(tl.log2(amax / 448.0)))
    q = tl.clamp(v / scale, -448.0, 448.0)
    tl.store(q_ptr + row * n + cols, q.to(q_ptr.dtype.element_ty))
    if COL_MAJOR:  # as DeepGEMM reads them
        tl.store(s_ptr + grp * rows + row, scale)
    else:  # as vLLM's ep_scatter reads them
        tl.store(s_ptr + row * (n // GROUP) + grp, scale)


def quant_groups(x: torch.Tensor, silu_mul: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token, per-128-column FP8 (vLLM's per_token_group_quant_fp8 with UE8M0 scales); with silu_mul, of
    SiLU(first half) * second half (vLLM's silu_and_mul first), in one launch, scales column-major for
    DeepGEMM; without, row-major for the permutation."""
    rows = x.size(0)
    n = x.size(1) // 2 if silu_mul else x.size(1)
    q = torch.empty(rows, n, device=x.device, dtype=FP8)
    s = torch.empty(n // GROUP, rows, device=x.device, dtype=torch.float32)
    grid = (rows, n // GROUP)
    _act_quant_kernel[grid](x, q, s, rows, n, SILU_MUL=silu_mul, COL_MAJOR=silu_mul, GROUP=GROUP)
    return q, (s.t() if silu_mul else s.view(rows, n // GROUP))


def random_weights(experts: int, n: int, k: int, dev) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.empty(experts, n, k, dtype=FP8, device=dev)
    for e in range(experts):  # one expert at a time keeps the bf16 staging small
        w[e] = (torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.5).to(FP8)
    scale = torch.exp2(torch.randint(-9, -6, (experts, n // GROUP, k // GROUP), device=dev).float())
    return w, scale


class Layer:
    """One MoE layer's buffers and the stages of DeepGemmExperts.apply as callables. With expert parallelism
    (ep > 1, no DP attention) every rank sees all tokens and holds experts / ep of them (rank 0's here); vLLM
    maps the others to -1 with its expert map, and sizes M_sum by the local expert count."""

    def __init__(self, helpers: dict, m: int, n: int, ep: int, w1, w1s, w2, w2s, dev):
        self.h, self.n = helpers, n
        local = EXPERTS // ep
        self.local = local
        self.expert_map = None
        if ep > 1:
            self.expert_map = torch.full((EXPERTS,), -1, device=dev, dtype=torch.int32)
            self.expert_map[:local] = torch.arange(local, device=dev, dtype=torch.int32)
        self.w1, self.w1s, self.w2, self.w2s = w1, w1s, w2, w2s
        self.x = torch.randn(m, HIDDEN, device=dev, dtype=torch.bfloat16)
        self.topk_ids = torch.rand(m, EXPERTS, device=dev).topk(TOPK, dim=1).indices.int()
        self.topk_w = torch.softmax(torch.randn(m, TOPK, device=dev), -1).float()
        self.m_sum = helpers["compute_aligned_M"](m, TOPK, local, GROUP, None)
        mapped = self.topk_ids if self.expert_map is None else self.expert_map[self.topk_ids.long()]
        self.count_at = mapped.clamp(min=0).long().flatten()
        self.count_one = (mapped >= 0).int().flatten()
        self.aq, self.aqs = quant_groups(self.x, silu_mul=False)
        self.a_perm = torch.empty(self.m_sum, HIDDEN, device=dev, dtype=FP8)
        self.a_perm_s = torch.empty(self.m_sum, HIDDEN // GROUP, device=dev)
        self.expert_ids = torch.zeros(self.m_sum, device=dev, dtype=torch.int32)
        self.start = torch.empty(local, device=dev, dtype=torch.int32)
        self.inv_perm = torch.empty(m, TOPK, device=dev, dtype=torch.int32)
        self.mm1 = torch.empty(self.m_sum, 2 * n, device=dev, dtype=torch.bfloat16)
        self.a2, self.a2s = quant_groups(torch.randn(self.m_sum, 2 * n, device=dev), silu_mul=True)
        self.counts = torch.empty(local, device=dev, dtype=torch.int32)
        self.mm2 = torch.empty(self.m_sum, HIDDEN, device=dev, dtype=torch.bfloat16)
        self.out = torch.empty(m, HIDDEN, device=dev, dtype=torch.bfloat16)

    def permute(self):
        # vLLM counts with a Triton kernel; scatter_add does it here without bincount's host sync
        self.counts.zero_().scatter_add_(0, self.count_at, self.count_one)
        self.expert_ids.zero_()  # vLLM allocates these with torch.zeros when counts are not on the host
        self.h["ep_scatter"](
            self.aq, self.aqs, self.topk_ids, self.counts, self.expert_map, self.start,
            self.a_perm, self.a_perm_s, self.expert_ids, self.inv_perm,
        )  # fmt: skip

    def gate_up(self):
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous(
            (self.a_perm, self.a_perm_s), (self.w1, self.w1s), self.mm1, self.expert_ids,
            disable_ue8m0_cast=False,
        )  # fmt: skip

    def act_quant(self):
        self.a2, self.a2s = quant_groups(self.mm1, silu_mul=True)

    def down(self):
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous(
            (self.a2, self.a2s), (self.w2, self.w2s), self.mm2, self.expert_ids, disable_ue8m0_cast=False
        )

    def unpermute(self):
        self.h["ep_gather"](self.mm2, self.topk_ids, self.topk_w, self.inv_perm, self.expert_map, self.out)

    def moe(self):
        self.aq, self.aqs = quant_groups(self.x, silu_mul=False)
        self.permute()
        self.gate_up()
        self.act_quant()
        self.down()
        self.unpermute()

    def graphed_moe(self):
        """The whole path captured in a CUDA graph, as vLLM's decode steps replay it (no launch costs)."""
        self.moe()  # JIT-compiles and warms everything the capture will hit
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.moe()
        return graph.replay

    def check(self) -> float:
        """Relative error of the layer's output against a dequantised torch product."""
        self.moe()
        torch.cuda.synchronize()

        def deq(w, s, e):
            return w[e].float() * s[e].repeat_interleave(GROUP, 0).repeat_interleave(GROUP, 1)

        a = (self.aq.float().view(-1, HIDDEN // GROUP, GROUP) * self.aqs[..., None]).view(-1, HIDDEN)
        ref = torch.zeros(self.x.size(0), HIDDEN, device=self.x.device)
        for t in range(self.x.size(0)):
            for j, e in enumerate(self.topk_ids[t].tolist()):
                if e >= self.local:  # another rank's expert (rank 0 holds the first experts / ep)
                    continue
                h = a[t] @ deq(self.w1, self.w1s, e).T
                act = torch.nn.functional.silu(h[: self.n]) * h[self.n :]
                ref[t] += self.topk_w[t, j] * (act @ deq(self.w2, self.w2s, e).T)
        return ((self.out.float() - ref).norm() / ref.norm()).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", required=True, type=Path, help="unpacked vllm/ package directory")
    ap.add_argument("--label", default="0.12.0", help="the vLLM version of --vllm")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument(
        "--shapes", nargs="+", default=["2:1", "4:1"], help="TP:EP pairs (EP divides TP; experts split by EP)"
    )
    ap.add_argument("--tokens", nargs="+", type=int, default=TOKENS)
    ap.add_argument("--check-tokens", nargs="*", type=int, default=[4], help="compare with torch at these")
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new rows after this")
    ap.add_argument("--warmup-ms", type=float, default=100.0, help="do_bench warm-up before each timing")
    args = ap.parse_args()
    t0 = time.time()
    dev = torch.device("cuda")
    helpers = load_vllm_helpers(args.vllm)
    print(
        f"device {torch.cuda.get_device_name()} cap {torch.cuda.get_device_capability()} torch "
        f"{torch.__version__} triton {triton.__version__} deep_gemm {getattr(deep_gemm, '__version__', '?')}"
    )
    fields = [
        "vllm", "tp", "ep", "experts", "topk", "hidden", "inter", "tokens", "m_sum", "stage", "latency_us",
        "p10_us", "p90_us", "check_rel_err",
    ]  # fmt: skip
    torch.manual_seed(0)
    with args.out.open("w", newline="") as fh:
        out = csv.DictWriter(fh, fields)
        out.writeheader()
        for shape in args.shapes:
            tp, ep = (int(x) for x in shape.split(":"))
            n = INTER // (tp // ep)  # the experts' TP split is what EP leaves of TP
            w1, w1s = random_weights(EXPERTS // ep, 2 * n, HIDDEN, dev)
            w2, w2s = random_weights(EXPERTS // ep, HIDDEN, n, dev)
            for m in args.tokens:
                if time.time() - t0 > args.budget_s:
                    print(f"budget spent: stopped before tp{tp} ep{ep} M={m}")
                    return
                layer = Layer(helpers, m, n, ep, w1, w1s, w2, w2s, dev)
                err = f"{layer.check():.4f}" if m in args.check_tokens else ""
                for stage in STAGES:
                    fn = layer.graphed_moe() if stage == "moe_graph" else getattr(layer, stage)
                    lat, p10, p90 = bench(fn, args.warmup_ms)
                    out.writerow(dict(
                        vllm=args.label, tp=tp, ep=ep, experts=EXPERTS, topk=TOPK, hidden=HIDDEN, inter=n,
                        tokens=m, m_sum=layer.m_sum, stage=stage, latency_us=round(lat, 3),
                        p10_us=round(p10, 3), p90_us=round(p90, 3),
                        check_rel_err=err if stage.startswith("moe") else "",
                    ))  # fmt: skip
                    fh.flush()
                    print(f"tp{tp} ep{ep} N={n} M={m} M_sum={layer.m_sum} {stage}: {lat:.1f} us {err}")
                del layer
            del w1, w1s, w2, w2s
            torch.cuda.empty_cache()
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
