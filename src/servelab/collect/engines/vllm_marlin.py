"""vLLM's Marlin MXFP4 MoE expert compute (fused_marlin_moe, experts/marlin_moe.py of vLLM 0.24 / 0.25) on
one rank, from the _moe_C library of the wheel; nothing of vLLM is imported.

What runs per key, as fused_marlin_moe runs it (scripts/time_vllm_marlin_moe.py's docstring has the details
this follows and the 0.18 -> 0.24 comparison): hidden padded to a multiple of 256 and the rank's intermediate
to a multiple of 128 (mxfp4_round_up_hidden_size_and_intermediate_size); block_size_m the first of 8, 16,
32, 48, 64 with tokens x topk / local experts / block < 0.9; moe_align_block_size over the global experts
with the rank's expert map (EP) and ignore_invalid_experts; moe_wna16_marlin_gemm for gate-up (tokens rows,
top-k gathered), the activation, moe_wna16_marlin_gemm for down (tokens x topk rows, routing weight in the
epilogue). Latency: those three captured together in one CUDA graph (vLLM's decode steps replay them so);
routing, padding copy and top-k sum are priced by the step graph's own ops.

Weights are random Marlin-layout words and random e8m0 scales (2^-5 .. 2^-3, never the NaN byte): a kernel's
time does not depend on which weights it multiplies, and every e2m1 nibble is a finite value. gpt-oss
(dtype mxfp4) has bf16 biases; DeepSeek-V4's FP4 experts (dtype fp4) have none. The activation is one Triton
kernel with swigluoai_and_mul's math (vLLM's lives in its _C library, not carried): DeepSeek-V4's SiLU with
clamp reads and writes the same bytes.

INT4 weight-only experts (dtype int4: Kimi-K2's compressed-tensors W4A16, symmetric, one bf16 scale per 32
values) run the same fused_marlin_moe with b_q_type uint4b8 and bf16 group scales, no bias, SiLU-and-mul
between the GEMMs (CompressedTensorsWNA16MarlinMoEMethod, compressed_tensors_moe.py of vLLM 0.16.0;
fused_moe/oracle/int_wna16.py's MARLIN backend in 0.25.0). Nothing is padded: vLLM 0.16 takes Marlin only
where the hidden size is a multiple of 128 and the rank's intermediate of 64 (check_moe_marlin_supports_layer,
quantization/utils/marlin_utils.py), and runs its Triton WNA16 kernel otherwise, so other shapes are refused.
The Triton activation stands in for silu_and_mul (the same bytes read and written).
"""

import torch
import triton
import triton.language as tl

from servelab.collect.ops.common import Unsupported
from servelab.collect.timing import time_op

HIDDEN_PAD, INTER_PAD = 256, 128
MX_BLOCK = 32  # values per e8m0 scale
INT4_GROUP = 32  # values per bf16 scale of an INT4 (W4A16) expert
INT4_HIDDEN_MULTIPLE, INT4_INTER_MULTIPLE = 128, 64  # check_moe_marlin_supports_layer (vLLM 0.16.0)
BLOCK_SIZES_M = (8, 16, 32, 48, 64)
SCALE_BYTES = (122, 125)  # e8m0 bytes drawn from [122, 125): 2^-5 .. 2^-3
SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0
ACT_BLOCK = 1024
OPS = ("moe_align_block_size", "moe_wna16_marlin_gemm")
BACKEND = "vllm MarlinExperts (Marlin W4A16 grouped GEMM, MXFP4 weights, bf16 activations)"
INT4_BACKEND = "vllm MarlinExperts (Marlin W4A16 grouped GEMM, INT4 uint4b8 weights, bf16 group-32 scales)"


def scalar_type_id(exponent: int, mantissa: int, signed: bool, bias: int, finite_only: bool, nan: int) -> int:
    """vLLM's ScalarType.id (scalar_type.py): exponent, mantissa, signed, bias, finite-values-only and NaN
    representation packed from the low bits in 8, 8, 1, 32, 1 and 8 bits."""
    fields = ((exponent, 8), (mantissa, 8), (int(signed), 1), (bias, 32), (int(finite_only), 1), (nan, 8))
    value = offset = 0
    for field, bits in fields:
        value |= (field & ((1 << bits) - 1)) << offset
        offset += bits
    return value


FE2M1F_ID = scalar_type_id(2, 1, True, 0, True, 0)  # scalar_types.float4_e2m1f
UINT4B8_ID = scalar_type_id(0, 4, False, 8, False, 0)  # scalar_types.uint4b8 (ScalarType.uint(4, 8))


def round_up(x: int, y: int) -> int:
    return (x + y - 1) // y * y


def block_size_m(tokens: int, topk: int, local_experts: int) -> int:
    for block in BLOCK_SIZES_M:
        if tokens * topk / local_experts / block < 0.9:
            return block
    return BLOCK_SIZES_M[-1]


def align_len(tokens: int, topk: int, experts: int, block: int) -> tuple[int, int]:
    """moe_align_block_size's buffer lengths (sorted ids, expert blocks) over the global experts."""
    numel = tokens * topk
    sorted_len = numel + experts * (block - 1)
    if numel < experts:
        sorted_len = min(numel * block, sorted_len)
    return sorted_len, -(-sorted_len // block)


@triton.jit
def _swigluoai_kernel(x_ptr, out_ptr, d, alpha, limit, BLOCK: tl.constexpr):
    """x holds each row's gate/up pairs interleaved: out = (clamp(up, -limit, limit) + 1) * g *
    sigmoid(alpha * g), g = min(gate, limit), in fp32."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    gate = tl.load(x_ptr + row * 2 * d + 2 * cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * d + 2 * cols + 1, mask=mask, other=0.0).to(tl.float32)
    g = tl.minimum(gate, limit)
    u = tl.minimum(tl.maximum(up, -limit), limit)
    y = (u + 1.0) * g / (1.0 + tl.exp(-g * alpha))
    tl.store(out_ptr + row * d + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _ops():
    ops = torch.ops._moe_C
    missing = [name for name in OPS if not hasattr(ops, name)]
    if missing:
        raise Unsupported(
            f"torch.ops._moe_C has no {', '.join(missing)}: vLLM's _moe_C library is not loaded"
        )
    return ops


def bench(key, files=None) -> dict:
    ops = _ops()
    dev = torch.device("cuda")
    if key.experts % key.ep:
        raise Unsupported(f"{key.experts} experts do not split over ep {key.ep}")
    local = key.experts // key.ep
    int4 = key.dtype == "int4"
    if int4 and (key.hidden % INT4_HIDDEN_MULTIPLE or key.inter % INT4_INTER_MULTIPLE):
        raise Unsupported(
            f"hidden {key.hidden} / intermediate {key.inter}: vLLM runs INT4 experts through Marlin only at "
            f"multiples of {INT4_HIDDEN_MULTIPLE} / {INT4_INTER_MULTIPLE}"
        )
    if int4:
        n, k = key.inter, key.hidden
    else:
        n, k = round_up(key.inter, INTER_PAD), round_up(key.hidden, HIDDEN_PAD)
    group = INT4_GROUP if int4 else MX_BLOCK
    scale_bytes = 2 if int4 else 1
    m, topk = key.tokens, key.topk
    block = block_size_m(m, topk, local)
    sorted_len, blocks = align_len(m, topk, key.experts, block)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    bias = key.dtype == "mxfp4"  # gpt-oss's experts carry biases; DeepSeek-V4's do not
    expert_map = None
    if key.ep > 1:  # this rank holds the first `local` experts; the others' assignments are skipped
        expert_map = torch.full((key.experts,), -1, dtype=torch.int32, device=dev)
        expert_map[:local] = torch.arange(local, dtype=torch.int32, device=dev)

    def weights():
        def words(*shape):
            return torch.randint(-(2**31), 2**31 - 1, shape, dtype=torch.int32, device=dev)

        def scales(*shape):
            if int4:  # bf16 group scales of about the size a checkpoint's have
                return (torch.rand(shape, device=dev) * 0.01 + 0.001).bfloat16()
            return torch.randint(*SCALE_BYTES, shape, dtype=torch.uint8, device=dev).view(
                torch.float8_e8m0fnu
            )

        w = {
            "w1": words(local, k // 16, 2 * 2 * n),
            "s1": scales(local, k // group, 2 * n),
            "w2": words(local, n // 16, 2 * k),
            "s2": scales(local, n // group, k),
        }
        w["b1"] = (torch.randn(local, 2 * n, device=dev) * 0.1).bfloat16() if bias else None
        w["b2"] = (torch.randn(local, k, device=dev) * 0.1).bfloat16() if bias else None
        return w

    def make():
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        ids = torch.rand(m, key.experts, device=dev).topk(topk, dim=1).indices.to(torch.int32)
        topk_w = torch.softmax(torch.randn(m, topk, device=dev), -1).float().contiguous()
        sorted_ids = torch.empty(sorted_len, dtype=torch.int32, device=dev)
        expert_ids = torch.empty(blocks, dtype=torch.int32, device=dev)
        ntp = torch.empty(1, dtype=torch.int32, device=dev)
        ops.moe_align_block_size(ids, key.experts, block, sorted_ids, expert_ids, ntp, expert_map)
        buf = {
            "x": x,
            "route": (topk_w, sorted_ids, expert_ids, ntp),
            "workspace": torch.zeros(sms * 4, dtype=torch.int32, device=dev),
            # zeros: with EP the rows of other ranks' experts are never written (and must not read as NaN)
            "cache1": torch.zeros(m * topk, 2 * n, dtype=torch.bfloat16, device=dev),
            "cache2": torch.zeros(m * topk, n, dtype=torch.bfloat16, device=dev),
            "cache3": torch.zeros(m * topk, k, dtype=torch.bfloat16, device=dev),
        }
        return ({**weights(), **buf},)

    def gemm(a, c, w, b, s, route, workspace, top_k, mul, size_m, size_n, size_k):
        topk_w, sorted_ids, expert_ids, ntp = route
        ops.moe_wna16_marlin_gemm(
            a, c, w, b, s, None, None, None, None, None, workspace, sorted_ids, expert_ids, ntp,
            topk_w, block, top_k, mul, UINT4B8_ID if int4 else FE2M1F_ID, size_m, size_n, size_k,
            True, False, True, False, -1, -1, -1,
        )  # fmt: skip

    def run(x):
        gemm(
            x["x"],
            x["cache1"],
            x["w1"],
            x["b1"],
            x["s1"],
            x["route"],
            x["workspace"],
            topk,
            False,
            m,
            2 * n,
            k,
        )
        _swigluoai_kernel[(m * topk, triton.cdiv(n, ACT_BLOCK))](
            x["cache1"], x["cache2"], n, SWIGLU_ALPHA, SWIGLU_LIMIT, BLOCK=ACT_BLOCK
        )
        gemm(
            x["cache2"],
            x["cache3"],
            x["w2"],
            x["b2"],
            x["s2"],
            x["route"],
            x["workspace"],
            1,
            True,
            m * topk,
            k,
            n,
        )
        return x["cache3"]

    weight_bytes = local * (2 * n * k // 2 + k * n // 2 + (2 * n * k + k * n) // group * scale_bytes)
    t = time_op(make, run, weight_bytes + m * topk * (2 * n + n + k) * 2 + m * k * 2)
    return {
        **t,
        "backend": INT4_BACKEND if int4 else BACKEND,
        "hidden_padded": k,
        "inter_padded": n,
        "block_size_m": block,
        "routing": "uniform",
        "timing_note": "gate_up + activation + down captured together in one CUDA graph",
    }
