"""Time vLLM's Triton MXFP4 MoE path (gpt-oss on Hopper: `triton_kernel_moe_forward`) without installing vLLM.

vLLM 0.12 on Hopper (SM90) runs gpt-oss's MXFP4 MoE layers through the Mxfp4Backend.TRITON backend: the
OpenAI `triton_kernels` package that its wheel vendors (vllm/third_party/triton_kernels: routing, matmul_ogs
with the Hopper MX value/scale layouts, swiglu), pure Triton. Weight prep (Mxfp4MoEMethod, `_swizzle_mxfp4`):
the intermediate size per rank is padded to a multiple of 64 (2880/TP: 2880, 1440 -> 1472, 720 -> 768,
360 -> 384; hidden stays 2880), the uint8-packed e2m1 weights (2 per byte, along K) and their e8m0 scales
(one per 32 values) are transposed so K is dim 1 and converted to HopperMXValueLayout(mx_axis=1) and
HopperMXScaleLayout(mx_axis=1, num_warps=8); the biases are fp32. The forward (`triton_kernel_moe_forward`,
renormalize=True for gpt-oss) is `routing(router_logits, 4, sm_first=False)` (top-k of the logits, softmax
over the k, expert histogram and token sort), then `triton_kernel_fused_experts`: matmul_ogs for gate_up
(gathering the token rows, bias, the SwiGLU (alpha 1.702, limit 7.0) fused in the epilogue, writing
tokens x top-k rows of N/2) and matmul_ogs for down (bias, scattering the rows back and summing each token's
top-k rows weighted by the routing weights: the combine is in the kernel).

This script calls the vendored package (never vLLM itself, which needs its compiled ops); the calls mirror
gpt_oss_triton_kernels_moe.py. What runs, per (TP, tokens), each timed with triton.testing.do_bench (L2
flushed before every launch):
- routing: triton_kernels' `routing` on bf16 router logits (tokens x 128);
- gate_up: matmul_ogs with gather_indx and the fused SwiGLU activation, as vLLM calls it;
- down: matmul_ogs with scatter_indx and the routing weights (gammas), as vLLM calls it;
- moe: the whole of triton_kernel_moe_forward launched eagerly (routing, output and intermediate
  allocation, both matmuls; its time includes Python launch costs, which are large for matmul_ogs);
- moe_graph: the same captured in a CUDA graph and replayed, as vLLM's decode steps run it;
- routing_graph, gate_up_graph, down_graph: each stage alone captured and replayed (its GPU time: the eager
  stages above are mostly the host's launch cost at small token counts);
- routing_host, gate_up_host, down_host, moe_host: the host (CPU) time of one eager call, Python and launches,
  timed with perf_counter over 30 back-to-back calls without a sync (median; p10/p90 of the calls).

Routing is uniform: the router logits are i.i.d. normal, so each token picks 4 distinct experts of 128 at
random. Weights are random bytes (scales near 2^0) in the real swizzled Hopper layout; EP is 1 (every rank
holds all 128 experts and 2880/TP of the intermediate).

    PYTHONPATH=DIR/vllm/third_party python scripts/time_vllm_mxfp4_moe.py --vllm DIR/vllm \
        --out moe_mxfp4.csv [--shapes 1:1 8:1 2:1 4:1] [--tokens 1 2 4 ...] [--budget-s 400] [--warmup-ms 100]

Needs torch and triton (the vendored triton_kernels must work with the installed Triton); point --vllm at an
unpacked vLLM package (the `vllm/` directory of its wheel, or just its third_party/triton_kernels).
"""

import argparse
import csv
import importlib
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import triton
from kernel_timing import bench, graphed, host_time

# openai/gpt-oss-120b config.json: experts, top-k, hidden, moe intermediate before the TP split
EXPERTS, TOPK, HIDDEN, INTER = 128, 4, 2880, 2880
MX_BLOCK = 32  # values per e8m0 scale
PAD = 64  # vLLM pads the per-rank intermediate to this on the Hopper Triton path
NUM_WARPS = 8  # vLLM's num_warps for the scale layout without batched (pplx / DeepEP LL) MoE
SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0  # triton_kernel_fused_experts defaults
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
STAGES = ("routing", "gate_up", "down", "moe", "routing_graph", "gate_up_graph", "down_graph", "moe_graph")
HOST_STAGES = ("routing_host", "gate_up_host", "down_host", "moe_host")
TK = SimpleNamespace()  # the vendored triton_kernels modules, once imported
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def import_triton_kernels(vllm_dir: Path):
    """The vendored package, which PYTHONPATH must put first (PYTHONPATH=DIR/vllm/third_party), so that
    `import triton_kernels` gets vLLM's copy and not another installed one."""
    parent = vllm_dir / "third_party"
    if not (parent / "triton_kernels" / "matmul_ogs.py").exists():
        sys.exit(f"{parent}/triton_kernels: missing; --vllm must be an unpacked vllm/ package (0.11+)")
    try:
        pkg = importlib.import_module("triton_kernels")
    except ImportError:
        sys.exit(f"triton_kernels: not importable; run with PYTHONPATH={parent}")
    if not Path(pkg.__file__).resolve().is_relative_to(parent.resolve()):
        sys.exit(
            f"triton_kernels resolved to {pkg.__file__}, not the vendored copy: PYTHONPATH={parent} first"
        )
    for mod in ("matmul_ogs", "routing", "swiglu", "numerics", "tensor", "tensor_details.layout"):
        setattr(TK, mod.split(".")[-1], importlib.import_module(f"triton_kernels.{mod}"))
    return pkg


def swiglu_activation():
    """The SwiGLU epilogue exactly as triton_kernel_fused_experts builds it (per call)."""
    mo = TK.matmul_ogs
    fn = mo.FnSpecs("swiglu", TK.swiglu.swiglu_fn, ("alpha", "limit"))
    return mo.FusedActivation(fn, (SWIGLU_ALPHA, SWIGLU_LIMIT), 2)


def round_up(x: int, y: int) -> int:
    return (x + y - 1) // y * y


class Layer:
    """One gpt-oss MoE layer's weights (as vLLM's Triton backend holds them) and the forward's stages."""

    def __init__(self, n: int, dev):
        self.n = n  # padded per-rank intermediate
        # checkpoint layout: (E, rows, K/2) packed e2m1, (E, rows, K/32) e8m0, scales 2^-2 .. 2^0
        self.w1_raw = torch.randint(0, 256, (EXPERTS, 2 * n, HIDDEN // 2), dtype=torch.uint8, device=dev)
        self.w1s_raw = torch.randint(125, 128, (EXPERTS, 2 * n, HIDDEN // MX_BLOCK), device=dev).to(
            torch.uint8
        )
        self.w2_raw = torch.randint(0, 256, (EXPERTS, HIDDEN, n // 2), dtype=torch.uint8, device=dev)
        self.w2s_raw = torch.randint(125, 128, (EXPERTS, HIDDEN, n // MX_BLOCK), device=dev).to(torch.uint8)
        self.b1 = torch.randn(EXPERTS, 2 * n, device=dev) * 0.1
        self.b2 = torch.randn(EXPERTS, HIDDEN, device=dev) * 0.1
        self.w1, w1s = self.swizzle(self.w1_raw, self.w1s_raw)
        self.w2, w2s = self.swizzle(self.w2_raw, self.w2s_raw)
        self.pc1 = TK.matmul_ogs.PrecisionConfig(
            weight_scale=w1s, flex_ctx=TK.matmul_ogs.FlexCtx(rhs_data=self.flex())
        )
        self.pc2 = TK.matmul_ogs.PrecisionConfig(
            weight_scale=w2s, flex_ctx=TK.matmul_ogs.FlexCtx(rhs_data=self.flex())
        )
        self.act = swiglu_activation()

    @staticmethod
    def flex():
        return TK.numerics.InFlexData()

    @staticmethod
    def swizzle(q: torch.Tensor, s: torch.Tensor):
        """The Hopper branch of vLLM's _swizzle_mxfp4 (torch >= 2.8.1), through the vendored package."""
        v_layout, v_opts = TK.layout.make_default_matmul_mxfp4_w_layout(mx_axis=1)
        s_layout, s_opts = TK.layout.make_default_matmul_mxfp4_w_scale_layout(mx_axis=1, num_warps=NUM_WARPS)
        wq = TK.tensor.convert_layout(
            TK.tensor.wrap_torch_tensor(q.transpose(-2, -1), dtype=TK.tensor.FP4), v_layout, **v_opts
        )
        ws = TK.tensor.convert_layout(TK.tensor.wrap_torch_tensor(s.transpose(-2, -1)), s_layout, **s_opts)
        return wq, ws


class Run:
    """Buffers for one token count, and the forward split as vLLM's calls are."""

    def __init__(self, layer: Layer, m: int, dev):
        self.L, self.m = layer, m
        self.x = torch.randn(m, HIDDEN, device=dev, dtype=torch.bfloat16)
        self.logits = torch.randn(m, EXPERTS, device=dev, dtype=torch.bfloat16)
        self.inter = torch.empty(1, m * TOPK, layer.n, device=dev, dtype=torch.bfloat16)
        self.out = torch.empty(1, m, HIDDEN, device=dev, dtype=torch.bfloat16)
        self.routing()

    def routing(self):
        self.rd, self.gi, self.si = TK.routing.routing(self.logits, TOPK, sm_first=False)  # renormalize=True

    def gate_up(self, y=None):
        L = self.L
        TK.matmul_ogs.matmul_ogs(
            self.x, L.w1, L.b1, self.rd, gather_indx=self.gi, precision_config=L.pc1, gammas=None,
            fused_activation=L.act, y=self.inter if y is None else y,
        )  # fmt: skip

    def down(self, x=None, y=None):
        L = self.L
        x = self.inter if x is None else x
        TK.matmul_ogs.matmul_ogs(
            x.view(self.m * TOPK, L.n), L.w2, L.b2, self.rd, scatter_indx=self.si, precision_config=L.pc2,
            gammas=self.rd.gate_scal, y=self.out if y is None else y,
        )  # fmt: skip

    def moe(self) -> torch.Tensor:
        """triton_kernel_moe_forward + triton_kernel_fused_experts as vLLM runs them (no intermediate cache
        passed: it allocates one per call; the FusedActivation is built per call)."""
        L = self.L
        rd, gi, si = TK.routing.routing(self.logits, TOPK, sm_first=False)
        output = torch.empty_like(self.x)
        m, k = self.x.shape
        inter = torch.empty((1, m * TOPK, L.n), device=self.x.device, dtype=self.x.dtype)
        out3 = output.view(1, m, k)
        act = swiglu_activation()
        mm = TK.matmul_ogs.matmul_ogs
        mm(self.x, L.w1, L.b1, rd, gather_indx=gi, precision_config=L.pc1, gammas=None, fused_activation=act,
           y=inter)  # fmt: skip
        mm(inter.view(m * TOPK, L.n), L.w2, L.b2, rd, scatter_indx=si, precision_config=L.pc2,
           gammas=rd.gate_scal, y=out3)  # fmt: skip
        return out3.view(m, k)

    def check(self) -> float:
        """Relative error of moe() against a dequantised fp32 torch product (top-k of the same logits)."""
        out = self.moe().float()
        L, dev = self.L, self.x.device
        lut = torch.tensor(E2M1 + [-v for v in E2M1], device=dev)

        def deq(q, s, e):
            vals = torch.stack([lut[(q[e] & 0xF).long()], lut[(q[e] >> 4).long()]], -1).flatten(-2)
            return vals * torch.exp2(s[e].float() - 127).repeat_interleave(MX_BLOCK, -1)

        wv, ids = self.logits.float().topk(TOPK, dim=1)
        wts = torch.softmax(wv, -1)
        ref = torch.zeros(self.m, HIDDEN, device=dev)
        x = self.x.float()
        for t in range(self.m):
            for j, e in enumerate(ids[t].tolist()):
                h = x[t] @ deq(L.w1_raw, L.w1s_raw, e).T + L.b1[e]
                g, lin = h[::2].clamp(max=SWIGLU_LIMIT), h[1::2].clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT)
                a = (g * torch.sigmoid(SWIGLU_ALPHA * g) * (lin + 1)).bfloat16().float()
                ref[t] += wts[t, j] * (a @ deq(L.w2_raw, L.w2s_raw, e).T + L.b2[e])
        return ((out - ref).norm() / ref.norm()).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", required=True, type=Path, help="unpacked vllm/ package directory")
    ap.add_argument("--label", default="0.12.0", help="the vLLM version of --vllm")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument(
        "--shapes", nargs="+", default=["1:1", "8:1", "2:1", "4:1"], help="TP:EP pairs (EP 1 only)"
    )
    ap.add_argument("--tokens", nargs="+", type=int, default=TOKENS)
    ap.add_argument("--check-tokens", nargs="*", type=int, default=[4], help="compare with torch at these")
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new rows after this")
    ap.add_argument("--warmup-ms", type=float, default=100.0, help="do_bench warm-up before each timing")
    args = ap.parse_args()
    t0 = time.time()
    dev = torch.device("cuda")
    tk = import_triton_kernels(args.vllm)
    print(
        f"device {torch.cuda.get_device_name()} cap {torch.cuda.get_device_capability()} torch "
        f"{torch.__version__} triton {triton.__version__} triton_kernels {Path(tk.__file__).parent}"
    )
    fields = [
        "vllm", "tp", "ep", "experts", "topk", "hidden", "inter", "inter_padded", "tokens", "stage",
        "latency_us", "p10_us", "p90_us", "check_rel_err",
    ]  # fmt: skip
    torch.manual_seed(0)
    with args.out.open("w", newline="") as fh:
        out = csv.DictWriter(fh, fields)
        out.writeheader()
        for shape in args.shapes:
            tp, ep = (int(x) for x in shape.split(":"))
            if ep != 1:
                sys.exit("EP > 1 is not modelled here (vLLM maps ids with an expert map first)")
            inter = INTER // tp
            n = round_up(inter, PAD)
            layer = Layer(n, dev)
            for m in args.tokens:
                if time.time() - t0 > args.budget_s:
                    print(f"budget spent: stopped before tp{tp} M={m}")
                    return
                run = Run(layer, m, dev)
                err = f"{run.check():.4f}" if m in args.check_tokens else ""
                for stage in STAGES + HOST_STAGES:
                    try:
                        if stage.endswith("_host"):
                            lat, p10, p90 = host_time(getattr(run, stage.removesuffix("_host")))
                        else:
                            name = stage.removesuffix("_graph")
                            fn = graphed(getattr(run, name)) if name != stage else getattr(run, stage)
                            lat, p10, p90 = bench(fn, args.warmup_ms)
                    except Exception as exc:  # record and go on (e.g. a capture that syncs)
                        print(f"tp{tp} M={m} {stage}: FAILED {type(exc).__name__}: {exc}")
                        continue
                    out.writerow(dict(
                        vllm=args.label, tp=tp, ep=ep, experts=EXPERTS, topk=TOPK, hidden=HIDDEN, inter=inter,
                        inter_padded=n, tokens=m, stage=stage, latency_us=round(lat, 3), p10_us=round(p10, 3),
                        p90_us=round(p90, 3), check_rel_err=err if stage.startswith("moe") else "",
                    ))  # fmt: skip
                    fh.flush()
                    print(f"tp{tp} N={n} M={m} {stage}: {lat:.1f} us {err}", flush=True)
                del run
            del layer
            torch.cuda.empty_cache()
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
