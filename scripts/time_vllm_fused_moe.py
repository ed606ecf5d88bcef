"""Time vLLM's block-FP8 fused-MoE Triton kernel on this GPU, without installing vLLM.

vLLM's fused_moe.py imports most of vLLM (its C++ ops, platform probes, logging). This script reads the file
as text and runs only the parts that decide the kernel's time: the Triton kernel (`fused_moe_kernel` and the
helper it calls), `get_default_config`, and, where the version has it, `enable_swap_ab`; the tuned config
JSON files next to it are picked by vLLM's own file-name and nearest-batch rules. What vLLM's C++ ops do
outside the GEMMs (moe_align_block_size's sorted token ids, expert ids and padded count; per-token-group FP8
quantisation of the activations) is done here in torch, outside the timed region.

Timed per (shape, tokens): the gate-up GEMM (w1: E x 2N x hidden, each token repeated top-k times) and the
down GEMM (w2: E x hidden x N, routed weights applied), each with triton.testing.do_bench (L2 flushed before
every launch, as a multi-layer decode step finds its weights in HBM), median and p10/p90. Routing is uniform:
each token picks top-k distinct experts at random. The activation between the GEMMs (SiLU-and-mul with its FP8
quantisation) and the top-k sum are vLLM C++ kernels and are not timed.

Expert parallelism (--ep, vLLM's --enable-expert-parallel at TP x DP ranks with no DP attention, "TEP"): each
rank holds experts / ep of the experts, each split by tp / ep (at ep = tp: the full intermediate width), and
sees every token of the batch. vLLM 0.12.0 runs rank 0 of such a layer as follows, and this script times the
same launches:
- the expert map: `determine_expert_map` (model_executor/layers/fused_moe/layer.py, "linear" placement) gives
  rank r the global experts [r x E/ep, (r+1) x E/ep) and maps every other expert to -1;
- the config: `fused_experts_impl` / `TritonExperts.apply` (fused_moe.py) call `try_get_optimal_moe_config`
  with the local weights' shapes, so the tuned file is `E=<local experts>,N=<local width>,...` and
  `get_default_config` sees the local E;
- the alignment: `moe_align_block_size` (moe_align_block_size.py) is called with the GLOBAL expert count and
  the expert map: it pads every global expert's picks to BLOCK_SIZE_M and only then maps the block's expert
  id through the map (`expert_ids = expert_map[expert_ids]`), so blocks of other ranks' experts stay in the
  grid with expert id -1;
- the kernel: `fused_moe_kernel` (fused_moe.py) sees expert id -1, calls `write_zeros_to_output` for the
  block's rows and returns, for both GEMMs.
Routing is uniform top-k over all E experts (every token picks top-k distinct global experts at random); rank
0 computes its local picks. --ep 1 is the old run: no map, the same launches and random draws.

Needs only torch and triton, and its sibling modules kernel_timing.py and moe_ep.py (run it where the GPU
is; nothing of servelab). vLLM's code is not part of servelab: point --vllm at an unpacked vLLM package (the
`vllm/` directory of its wheel) at run time.

    python scripts/time_vllm_fused_moe.py --vllm DIR/vllm --label 0.12.0 --out moe_vllm.csv \
        [--shapes qwen3-235b] [--tp 1 2 4 8] [--ep 1] [--tokens 1 2 4 ...] [--budget-s 400] [--check] \
        [--warmup-ms 100]
"""

import argparse
import ast
import csv
import functools
import json
import math
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import triton
import triton.language as tl
from kernel_timing import bench
from moe_ep import expert_map, rank_grid

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
BLOCK = [128, 128]  # the checkpoints' weight quantisation block (n, k)

# name: (experts, top-k, hidden, moe intermediate before the TP split), from each checkpoint's config.json
SHAPES = {
    "qwen3-235b": (128, 8, 4096, 1536),  # Qwen/Qwen3-235B-A22B-FP8
    "qwen3-30b": (128, 8, 2048, 768),  # Qwen/Qwen3-30B-A3B-FP8
    "minimax-m2": (256, 8, 3072, 1536),  # MiniMaxAI/MiniMax-M2.5
    "deepseek-r1": (256, 8, 7168, 2048),  # deepseek-ai/DeepSeek-R1 (routed experts)
}
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]


def load_vllm_parts(vllm_dir: Path, capability: tuple[int, int]) -> SimpleNamespace:
    """The kernel, the default-config rule and the swap-AB rule, taken from vLLM's source files as text."""
    moe_dir = vllm_dir / "model_executor" / "layers" / "fused_moe"
    platform = SimpleNamespace(
        is_rocm=lambda: False,
        is_cuda=lambda: True,
        is_device_capability=lambda c: c == capability[0] * 10 + capability[1],
    )
    ns: dict = {
        "__name__": "vllm_fused_moe_source",  # triton names the kernels after their module
        "triton": triton,
        "tl": tl,
        "torch": torch,
        "functools": functools,
        "current_platform": platform,
        "envs": SimpleNamespace(VLLM_BATCH_INVARIANT=False),
        "vllm_is_batch_invariant": lambda: False,
        "next_power_of_2": triton.next_power_of_2,
    }
    wanted = {
        moe_dir / "fused_moe.py": {"write_zeros_to_output", "fused_moe_kernel", "get_default_config"},
        moe_dir / "utils.py": {"enable_swap_ab"},
    }
    for path, names in wanted.items():
        if not path.exists():
            continue
        tree = ast.parse(path.read_text())
        nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
        # compiled under the real file name with the original line numbers, so triton.jit reads the source
        exec(compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec"), ns)
    for name in ("fused_moe_kernel", "get_default_config"):
        if name not in ns:
            sys.exit(f"{moe_dir}/fused_moe.py: no {name}; not a vLLM fused-MoE source this script knows")
    return SimpleNamespace(
        kernel=ns["fused_moe_kernel"],
        default_config=ns["get_default_config"],
        swap_ab=ns.get("enable_swap_ab"),
        config_dir=moe_dir / "configs",
        args=set(ns["fused_moe_kernel"].arg_names),
    )


def tuned_configs(parts, experts: int, n: int, device_name: str) -> tuple[dict | None, str]:
    """vLLM's tuned table for (E, N) on this device (its file-name rule; H200 variants share one name)."""
    if "H200" in device_name.split("_"):
        device_name = "NVIDIA_H200"
    name = (
        f"E={experts},N={n},device_name={device_name},dtype=fp8_w8a8,block_shape=[{BLOCK[0]},{BLOCK[1]}].json"
    )
    path = parts.config_dir / name
    if not path.exists():
        return None, "default"
    table = json.loads(path.read_text())
    table.pop("triton_version", None)
    return {int(k): v for k, v in table.items()}, name


def pick_config(parts, tuned, m: int, experts: int, n: int, hidden: int, topk: int) -> dict:
    if tuned:
        return dict(tuned[min(tuned, key=lambda x: abs(x - m))])
    return dict(parts.default_config(m, experts, n, hidden, topk, "fp8_w8a8", BLOCK))


def quantize_groups(x: torch.Tensor, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token, per-128-column FP8 quantisation (what vLLM's per_token_group_fp8_quant produces)."""
    rows, cols = x.shape
    pad = (-cols) % group
    xp = torch.nn.functional.pad(x.float(), (0, pad)).view(rows, -1, group)
    scale = (xp.abs().amax(-1).clamp(min=1e-10) / FP8_MAX).float()
    q = (xp / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).view(rows, -1)[:, :cols].to(FP8)
    return q.contiguous(), scale.contiguous()


def random_weights(experts: int, n: int, k: int, dev) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.empty(experts, n, k, dtype=FP8, device=dev)
    for e in range(experts):  # one expert at a time keeps the bf16 staging small
        w[e] = (torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.5).to(FP8)
    scale = torch.rand(experts, math.ceil(n / BLOCK[0]), math.ceil(k / BLOCK[1]), device=dev) * 1e-2 + 1e-3
    return w, scale


def align(topk_ids: torch.Tensor, block_m: int, experts: int, emap: list[int] | None = None):
    """moe_align_block_size's outputs: token slots grouped by expert, each expert padded to block_m. With an
    expert map (EP), `experts` is the global count and each block's expert id goes through the map after the
    padding, as moe_align_block_size does it: other ranks' blocks stay, with expert id -1."""
    flat = topk_ids.flatten().cpu()
    numel = flat.numel()
    max_padded = numel + experts * (block_m - 1)
    if numel < experts:
        max_padded = min(numel * block_m, max_padded)
    sorted_ids = torch.full((max_padded,), numel, dtype=torch.int32)
    expert_ids = torch.zeros((triton.cdiv(max_padded, block_m),), dtype=torch.int32)
    pos = 0
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts).tolist()
    start = 0
    for e, c in enumerate(counts):
        if c == 0:
            continue
        sorted_ids[pos : pos + c] = order[start : start + c].int()
        blocks = triton.cdiv(c, block_m)
        expert_ids[pos // block_m : pos // block_m + blocks] = e if emap is None else emap[e]
        pos += blocks * block_m
        start += c
    dev = topk_ids.device
    return sorted_ids.to(dev), expert_ids.to(dev), torch.tensor([pos], dtype=torch.int32, device=dev)


def launcher(
    parts, a, a_scale, w, w_scale, c, topk_ids, topk_weights, top_k, mul_routed, config, experts, emap=None
):
    """One fused_moe_kernel launch as vLLM's invoke function makes it; returns a no-argument callable.
    `experts` is the global count; `emap` the rank's expert map under EP (None: every expert is local)."""
    config = dict(config)
    config["SPLIT_K"] = 1  # as vLLM sets it
    block_m = config["BLOCK_SIZE_M"]
    block_k = min(config.pop("BLOCK_SIZE_K"), *BLOCK)
    num_tokens = a.size(0) * top_k
    naive = "naive_block_assignment" in parts.args and topk_ids.numel() * 4 <= experts
    if naive:
        sorted_ids, expert_ids = None, topk_ids.flatten().int()
        if emap is not None:
            expert_ids = torch.tensor(emap, dtype=torch.int32, device=a.device)[expert_ids.long()]
        padded = torch.tensor([topk_ids.numel() * block_m], dtype=torch.int32, device=a.device)
        em = num_tokens * block_m
    else:
        sorted_ids, expert_ids, padded = align(topk_ids, block_m, experts, emap)
        em = sorted_ids.size(0)
        if a.size(0) < block_m:
            em = min(em, a.size(0) * top_k * block_m)
    extra = {}
    if "naive_block_assignment" in parts.args:
        extra["naive_block_assignment"] = naive
    if "SWAP_AB" in parts.args:
        extra["SWAP_AB"] = bool(parts.swap_ab and parts.swap_ab(block_m, config["BLOCK_SIZE_N"]))
    if "USE_TD" in parts.args:
        extra["USE_TD"] = False
    grid = (triton.cdiv(em, block_m) * triton.cdiv(w.size(1), config["BLOCK_SIZE_N"]),)

    def run():
        parts.kernel[grid](
            a, w, c, None, a_scale, w_scale, topk_weights, sorted_ids, expert_ids, padded,
            w.size(1), w.size(2), em, num_tokens,
            a.stride(0), a.stride(1), w.stride(0), w.stride(2), w.stride(1), c.stride(1), c.stride(2),
            a_scale.stride(0), a_scale.stride(1), w_scale.stride(0), w_scale.stride(2), w_scale.stride(1),
            0, 0, BLOCK[0], BLOCK[1],
            MUL_ROUTED_WEIGHT=mul_routed, top_k=top_k, compute_type=tl.bfloat16,
            use_fp8_w8a8=True, use_int8_w8a8=False, use_int8_w8a16=False, per_channel_quant=False,
            HAS_BIAS=False, BLOCK_SIZE_K=block_k, **extra, **config,
        )  # fmt: skip

    return run, ("naive" if naive else "aligned") + (",swap_ab" if extra.get("SWAP_AB") else "")


def reference(a, a_scale, w, w_scale, topk_ids, top_k, routed, emap=None):
    """Dequantised torch product of the same launch (rows = token x top-k slot; under EP, zeros where the
    slot's expert is another rank's)."""
    k = a.size(1)
    deq_a = a.float().view(a.size(0), -1, BLOCK[1]) if k % BLOCK[1] == 0 else None
    if deq_a is None:
        return None
    deq_a = (deq_a * a_scale[..., None]).view(a.size(0), k)
    out = []
    for slot, e in enumerate(topk_ids.flatten().tolist()):
        if emap is not None:
            e = emap[e]
            if e < 0:
                out.append(torch.zeros(w.size(1), device=a.device))
                continue
        we = (
            w[e].float()
            * w_scale[e].repeat_interleave(BLOCK[0], 0)[: w.size(1)].repeat_interleave(BLOCK[1], 1)[:, :k]
        )
        row = deq_a[slot // top_k] @ we.T
        out.append(row * (routed.flatten()[slot] if routed is not None else 1.0))
    return torch.stack(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", required=True, type=Path, nargs="+", help="unpacked vllm/ package directories")
    ap.add_argument("--label", required=True, nargs="+", help="the vLLM version of each --vllm directory")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--tp", nargs="+", type=int, default=[1, 2, 4, 8])
    ap.add_argument(
        "--ep", nargs="+", type=int, default=[1], help="expert-parallel sizes inside each tp (must divide it)"
    )
    ap.add_argument("--tokens", nargs="+", type=int, default=TOKENS)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new shapes after this")
    ap.add_argument("--check", action="store_true", help="compare two launches per shape with torch")
    ap.add_argument("--warmup-ms", type=float, default=100.0, help="do_bench warm-up before each timing")
    args = ap.parse_args()
    if len(args.vllm) != len(args.label):
        sys.exit("--vllm and --label: one label per directory")
    t0 = time.time()
    dev = torch.device("cuda")
    cap = torch.cuda.get_device_capability()
    device_name = torch.cuda.get_device_name().replace(" ", "_")
    versions = [(lab, load_vllm_parts(d, cap)) for d, lab in zip(args.vllm, args.label, strict=True)]
    gpu = torch.cuda.get_device_name()
    print(f"device {gpu} cap {cap} torch {torch.__version__} triton {triton.__version__}")
    fields = [
        "vllm", "model", "tp", "ep", "experts", "local_experts", "topk", "hidden", "inter", "tokens", "gemm",
        "latency_us", "p10_us", "p90_us", "config_file", "config", "path", "check_rel_err",
    ]  # fmt: skip
    torch.manual_seed(0)
    with args.out.open("w", newline="") as fh:
        out = csv.DictWriter(fh, fields)
        out.writeheader()
        for model, tp, ep, local, n in rank_grid(SHAPES, args.shapes, args.tp, args.ep):
            if time.time() - t0 > args.budget_s:
                print(f"budget spent: stopped before {model} tp{tp} ep{ep}")
                return
            experts, topk, hidden, _ = SHAPES[model]
            emap = expert_map(experts, ep) if ep > 1 else None
            w1, w1s = random_weights(local, 2 * n, hidden, dev)
            w2, w2s = random_weights(local, hidden, n, dev)
            for label, parts in versions:
                tuned, cfg_name = tuned_configs(parts, local, n, device_name)
                for m in args.tokens:
                    x = torch.randn(m, hidden, device=dev, dtype=torch.bfloat16)
                    topk_ids = torch.rand(m, experts, device=dev).topk(topk, dim=1).indices.int()
                    routed = torch.softmax(torch.randn(m, topk, device=dev), -1).float().contiguous()
                    cfg = pick_config(parts, tuned, m, local, n, hidden, topk)
                    a1, a1s = quantize_groups(x)
                    c1 = torch.empty(m, topk, 2 * n, device=dev, dtype=torch.bfloat16)
                    g1, path1 = launcher(
                        parts, a1, a1s, w1, w1s, c1, topk_ids, None, topk, False, cfg, experts, emap
                    )
                    act = torch.randn(m * topk, n, device=dev, dtype=torch.bfloat16)
                    a2, a2s = quantize_groups(act)
                    c2 = torch.empty(m * topk, 1, hidden, device=dev, dtype=torch.bfloat16)
                    g2, path2 = launcher(
                        parts, a2, a2s, w2, w2s, c2, topk_ids, routed, 1, True, cfg, experts, emap
                    )
                    for gemm, fn, path, c, a, s, w, ws, tk, rw in (
                        ("gate_up", g1, path1, c1, a1, a1s, w1, w1s, topk, None),
                        ("down", g2, path2, c2, a2, a2s, w2, w2s, 1, routed),
                    ):
                        fn()
                        err = ""
                        if args.check and m in (4, 64):
                            ref = reference(a, s, w, ws, topk_ids, tk, rw, emap)
                            if ref is not None:
                                got = c.float().view(ref.shape)
                                # under EP a rank may hold none of a few tokens' picks: zeros expected
                                scale = ref.norm() if ref.norm() > 0 else 1.0
                                err = f"{((got - ref).norm() / scale).item():.4f}"
                        lat, p10, p90 = bench(fn, args.warmup_ms)
                        out.writerow(dict(
                            vllm=label, model=model, tp=tp, ep=ep, experts=experts, local_experts=local,
                            topk=topk, hidden=hidden, inter=n, tokens=m, gemm=gemm,
                            latency_us=round(lat, 3), p10_us=round(p10, 3), p90_us=round(p90, 3),
                            config_file=cfg_name, path=path, check_rel_err=err,
                            config=json.dumps(cfg, sort_keys=True),
                        ))  # fmt: skip
                        fh.flush()
                        print(f"{label} {model} tp{tp} ep{ep} N={n} M={m} {gemm}: {lat:.1f} us {path} {err}")
            del w1, w1s, w2, w2s
            torch.cuda.empty_cache()
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
