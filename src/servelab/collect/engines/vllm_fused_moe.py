"""vLLM's fused-MoE Triton kernel (fused_moe_kernel) on one rank, for block-FP8 or bf16 (unquantised)
experts, compiled from the wheel's own fused_moe.py without importing vLLM (scripts/time_vllm_fused_moe.py
did the same before this entry; its docstring says why the file is read as text).

Per key, as vLLM 0.25's fused_experts_impl launches it (invoke_fused_moe_triton_kernel): the config from the
wheel's tuned table for (local experts, intermediate per rank, device, dtype), nearest batch, else its
get_default_config (vllm_moe_config); naive block assignment where vLLM takes it (no expert map and
tokens x topk x 4 <= experts), otherwise moe_align_block_size over the global experts with the rank's expert
map (EP: the blocks of other ranks' experts get id -1, and the kernel writes zeros for them). Block-FP8:
SWAP_AB by the wheel's enable_swap_ab, BLOCK_SIZE_K capped at the 128-wide quantisation block. bf16 (vLLM's
unquantised oracle runs these Triton experts first on Hopper): no scales, no swap, the config's BLOCK_SIZE_K.
Timed: the gate-up launch and the down launch (routing weights applied) captured together in one CUDA graph.
The alignment and (block-FP8) the activations' per-token-group FP8 quantisation are done in torch
beforehand, outside the timed region (vLLM's C++ kernels there, not carried); so are SiLU-and-mul and the
top-k sum, which the step graph prices as other ops.
"""

import ast
import functools
import math
from pathlib import Path
from types import SimpleNamespace

import torch
import triton
import triton.language as tl

from servelab.collect.engines.vllm_moe_config import QUANT, Quant, pick_config
from servelab.collect.ops.common import Unsupported
from servelab.collect.timing import time_op

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
BLOCK = QUANT["fp8_block"].block or []  # the checkpoints' weight quantisation block (n, k)
SRC = "vllm/model_executor/layers/fused_moe/"
BACKENDS = {
    "fp8_block": "vllm fused_moe_kernel (Triton, block-FP8 w8a8)",
    "bf16": "vllm fused_moe_kernel (Triton, bf16)",
}

_parts: dict = {}


def load_parts(root: Path, capability: tuple[int, int]) -> SimpleNamespace:
    """The kernel, the default-config rule and the swap-AB rule, compiled from the wheel's source files (only
    those functions: the rest of the file imports vLLM)."""
    key = (str(root), capability)
    if key in _parts:
        return _parts[key]
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
        root / SRC / "fused_moe.py": {"write_zeros_to_output", "fused_moe_kernel", "get_default_config"},
        root / SRC / "utils.py": {"enable_swap_ab"},
    }
    for path, names in wanted.items():
        tree = ast.parse(path.read_text())
        nodes: list[ast.stmt] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
        # compiled under the real file name with the original line numbers, so triton.jit reads the source
        exec(compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec"), ns)
    for name in ("fused_moe_kernel", "get_default_config"):
        if name not in ns:
            raise Unsupported(
                f"{root / SRC}fused_moe.py has no {name}: not a fused-MoE source this entry knows"
            )
    parts = SimpleNamespace(
        kernel=ns["fused_moe_kernel"],
        default_config=ns["get_default_config"],
        swap_ab=ns.get("enable_swap_ab"),
        config_dir=root / SRC / "configs",
        args=set(ns["fused_moe_kernel"].arg_names),
    )
    _parts[key] = parts
    return parts


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


def align(topk_ids: torch.Tensor, block_m: int, experts: int, local: int):
    """moe_align_block_size's outputs over the global experts: token slots grouped by expert, each expert
    padded to block_m; then the expert map (experts past `local` belong to other ranks: id -1)."""
    flat = topk_ids.flatten().cpu()
    numel = flat.numel()
    max_padded = numel + experts * (block_m - 1)
    if numel < experts:
        max_padded = min(numel * block_m, max_padded)
    sorted_ids = torch.full((max_padded,), numel, dtype=torch.int32)
    expert_ids = torch.full((triton.cdiv(max_padded, block_m),), -1, dtype=torch.int32)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts).tolist()
    pos = start = 0
    for e, c in enumerate(counts):
        if c == 0:
            continue
        sorted_ids[pos : pos + c] = order[start : start + c].int()
        blocks = triton.cdiv(c, block_m)
        expert_ids[pos // block_m : pos // block_m + blocks] = e if e < local else -1
        pos += blocks * block_m
        start += c
    dev = topk_ids.device
    return sorted_ids.to(dev), expert_ids.to(dev), torch.tensor([pos], dtype=torch.int32, device=dev)


def scale_args(quant: Quant, a_scale, w_scale) -> tuple:
    """The kernel's scale pointers, their strides and the quantisation block, as
    invoke_fused_moe_triton_kernel passes them (no bias): per-token-group activation scales and per-block
    weight scales for block-FP8; None and zeros for bf16."""
    if not quant.use_fp8_w8a8:
        return (None, None, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    block = quant.block or [0, 0]
    return (
        a_scale, w_scale,
        a_scale.stride(0), a_scale.stride(1), w_scale.stride(0), w_scale.stride(2), w_scale.stride(1),
        0, 0, block[0], block[1],
    )  # fmt: skip


def launcher(parts, quant: Quant, a, a_scale, w, w_scale, c, route, topk_weights, top_k, mul_routed, config):
    """One fused_moe_kernel launch as invoke_fused_moe_triton_kernel makes it; a no-argument callable."""
    config = dict(config)
    config["SPLIT_K"] = 1
    block_k = config.pop("BLOCK_SIZE_K")
    if quant.block:
        block_k = min(block_k, *quant.block)
    sorted_ids, expert_ids, padded = route
    num_tokens = a.size(0) * top_k
    if sorted_ids is None:
        em = num_tokens * config["BLOCK_SIZE_M"]
    else:
        em = sorted_ids.size(0)
        if a.size(0) < config["BLOCK_SIZE_M"]:
            em = min(em, a.size(0) * top_k * config["BLOCK_SIZE_M"])
    extra = {}
    if "naive_block_assignment" in parts.args:
        extra["naive_block_assignment"] = sorted_ids is None
    if "SWAP_AB" in parts.args:  # vLLM swaps A and B for FP8 only
        swap = (
            quant.use_fp8_w8a8
            and parts.swap_ab
            and parts.swap_ab(config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"])
        )
        extra["SWAP_AB"] = bool(swap)
    if "USE_TD" in parts.args:
        extra["USE_TD"] = False
    grid = (triton.cdiv(em, config["BLOCK_SIZE_M"]) * triton.cdiv(w.size(1), config["BLOCK_SIZE_N"]),)
    a_s, w_s, *scale_strides = scale_args(quant, a_scale, w_scale)

    def run():
        parts.kernel[grid](
            a, w, c, None, a_s, w_s, topk_weights, sorted_ids, expert_ids, padded,
            w.size(1), w.size(2), em, num_tokens,
            a.stride(0), a.stride(1), w.stride(0), w.stride(2), w.stride(1), c.stride(1), c.stride(2),
            *scale_strides,
            MUL_ROUTED_WEIGHT=mul_routed, top_k=top_k, compute_type=tl.bfloat16,
            use_fp8_w8a8=quant.use_fp8_w8a8, use_int8_w8a8=False, use_int8_w8a16=False,
            per_channel_quant=False, HAS_BIAS=False, BLOCK_SIZE_K=block_k, **extra, **config,
        )  # fmt: skip

    return run, ("naive" if sorted_ids is None else "aligned") + (",swap_ab" if extra.get("SWAP_AB") else "")


def bf16_weights(experts: int, n: int, k: int, dev) -> tuple[torch.Tensor, None]:
    return torch.randn(experts, n, k, device=dev, dtype=torch.bfloat16) * 0.05, None


def bf16_activations(x: torch.Tensor) -> tuple[torch.Tensor, None]:
    return x.contiguous(), None


def bench(key, files) -> dict:
    if files is None:
        raise Unsupported("the fused-MoE entry compiles the wheel's fused_moe.py: --engine-files")
    if key.experts % key.ep:
        raise Unsupported(f"{key.experts} experts do not split over ep {key.ep}")
    if key.dtype not in QUANT:
        raise Unsupported(f"fused_moe_kernel is timed for {', '.join(QUANT)} experts, not {key.dtype}")
    quant = QUANT[key.dtype]
    weights, activations = (
        (random_weights, quantize_groups) if quant.use_fp8_w8a8 else (bf16_weights, bf16_activations)
    )
    dev = torch.device("cuda")
    parts = load_parts(files.root, torch.cuda.get_device_capability())
    local, n, hidden, m, topk = key.experts // key.ep, key.inter, key.hidden, key.tokens, key.topk
    config, cfg_name = pick_config(
        parts.config_dir, parts.default_config, torch.cuda.get_device_name().replace(" ", "_"), quant,
        tokens=m, experts=local, n=n, hidden=hidden, topk=topk,
    )  # fmt: skip
    naive = key.ep == 1 and m * topk * 4 <= key.experts

    def make():
        w1, w1s = weights(local, 2 * n, hidden, dev)
        w2, w2s = weights(local, hidden, n, dev)
        ids = torch.rand(m, key.experts, device=dev).topk(topk, dim=1).indices.int()
        routed = torch.softmax(torch.randn(m, topk, device=dev), -1).float().contiguous()
        if naive:
            route = (
                None,
                ids.flatten(),
                torch.tensor([ids.numel() * config["BLOCK_SIZE_M"]], device=dev).int(),
            )
        else:
            route = align(ids, config["BLOCK_SIZE_M"], key.experts, local)
        a1, a1s = activations(torch.randn(m, hidden, device=dev, dtype=torch.bfloat16))
        a2, a2s = activations(torch.randn(m * topk, n, device=dev, dtype=torch.bfloat16))
        c1 = torch.zeros(m, topk, 2 * n, device=dev, dtype=torch.bfloat16)
        c2 = torch.zeros(m * topk, 1, hidden, device=dev, dtype=torch.bfloat16)
        g1, path = launcher(parts, quant, a1, a1s, w1, w1s, c1, route, None, topk, False, config)
        g2, _ = launcher(parts, quant, a2, a2s, w2, w2s, c2, route, routed, 1, True, config)
        return (g1, g2, c2)

    def run(g1, g2, c2):
        g1()
        g2()
        return c2

    weight_bytes = local * 3 * n * hidden * (1 if quant.use_fp8_w8a8 else 2)
    t = time_op(make, run, weight_bytes + m * topk * (2 * n + hidden) * 2)
    return {
        **t,
        "backend": BACKENDS[key.dtype],
        "config_file": cfg_name,
        "config": config,
        "path": "naive" if naive else "aligned",
        "routing": "uniform",
        "timing_note": "gate-up and down launches captured together in one CUDA graph",
    }
