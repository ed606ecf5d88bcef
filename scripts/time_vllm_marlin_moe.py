"""Time vLLM's Marlin MXFP4 MoE path (gpt-oss on Hopper, VLLM_MXFP4_USE_MARLIN=1) without installing vLLM.

With VLLM_MXFP4_USE_MARLIN=1 (InferenceX's vLLM gpt-oss H200 recipe sets it), vLLM 0.18 on Hopper runs
gpt-oss's MXFP4 MoE layers through Mxfp4Backend.MARLIN (mxfp4.py `get_mxfp4_backend`; vLLM 0.24 has no such
variable: its oracle, fused_moe/oracle/mxfp4.py, picks Marlin for moe_backend "marlin" or when the backends
before it are unavailable, and runs the path below unchanged). Weight prep: the hidden size is padded to a
multiple of 256 (2880 -> 3072; the layer zero-pads the activations with F.pad and slices the output back) and
the intermediate size per rank to a multiple of 128 (2880/TP: 2880 -> 2944, 1440 -> 1536, 720 -> 768, 360 ->
384); `prepare_moe_fp4_layer_for_marlin` repacks each expert's uint8 e2m1 weights (2 per byte along K, gate
and up rows interleaved as in the checkpoint) with gptq_marlin_repack into (K/16, 2N) int32 Marlin tiles,
turns the e8m0 scales (one per 32 values along K) into (K/32, N) float8_e8m0fnu in Marlin's scale order, and
permutes the bf16 biases. The forward: bf16 router logits -> `topk_softmax` (renormalize) ->
`fused_marlin_moe`: block_size_m = the first of 8, 16, 32, 48, 64 with tokens x 4 / 128 / block < 0.9 (else
64), `moe_align_block_size`, a lock workspace torch.zeros(SMs x 4), `moe_wna16_marlin_gemm` for gate_up (bias
in the epilogue), `swigluoai_and_mul` (gate at even columns, up at odd; alpha 1.702, limit 7),
`moe_wna16_marlin_gemm` for down over the tokens x 4 rows (top_k 1, bias, the routing weight multiplied in the
epilogue), `moe_sum` of each token's 4 rows, and the modular kernel's copy of the result into the layer's
output.

This script loads vLLM's compiled MoE ops from the `_moe_C` library of the vLLM 0.24.0 wheel
(vllm/_moe_C_stable_libtorch.abi3.so, built against torch 2.11's stable ABI and CUDA 13; its ops register
under torch.ops._moe_C) and calls them as marlin_moe.py does; nothing of vLLM is imported or copied.
`swigluoai_and_mul` lives in vLLM's `_C` library, which is not carried: `act` is one Triton kernel written
here with the CUDA kernel's math (fp32, bf16 in and out; one program per row and 1024 columns, where vLLM's
kernel runs one 1024-thread block per row with 16-byte loads), so its time may differ a little from vLLM's.
The Marlin layouts are made here in torch from random checkpoint-layout bytes (the permutation that vLLM's
tests check gptq_marlin_repack against, marlin_utils_test.py `marlin_weights`), so the check below can compare
the layer with a dequantised reference. What runs, per (TP, tokens), each timed with triton.testing.do_bench
(L2 flushed before every launch):
- pad: F.pad of the bf16 activations from 2880 to the padded hidden size;
- routing: `topk_softmax` on bf16 router logits (tokens x 128), its three outputs allocated as vLLM does;
- align: `moe_align_block_size` with the block_size_m rule, its three outputs allocated as vLLM does;
- gate_up: the first `moe_wna16_marlin_gemm` (tokens rows gathered 4 times, bias);
- act: swigluoai-and-mul of the tokens x 4 gate_up rows (the Triton kernel above);
- down: the second `moe_wna16_marlin_gemm` (bias, routing weights applied in the epilogue);
- sum: `moe_sum` of each token's 4 rows;
- moe: the whole layer eagerly (pad, routing, align, workspace, both GEMMs, act, sum, output copy; its time
  includes Python launch costs);
- moe_graph: the same captured in a CUDA graph and replayed, as vLLM's CUDA-graph steps run it: the number
  that matters; pad_graph ... sum_graph: each stage alone captured and replayed (its GPU time);
- gate_up_host, moe_host: the host (CPU) time of one eager call, timed with perf_counter over 30 back-to-back
  calls without a sync (median; p10/p90 of the calls).

Routing is uniform: the router logits are i.i.d. normal, so each token picks 4 distinct experts of 128 at
random. Weights are random bytes (every 4-bit pattern is an e2m1 value), scales random e8m0 bytes 2^-5 .. 2^-3
(never 0xFF, NaN), biases small random bf16, activations random normal; EP is 1 (every rank holds all 128
experts and 2880/TP of the intermediate). check_rel_err: the layer's output against an fp32 torch product of
the dequantised checkpoint-layout weights (bf16 rounding of the gate_up output and the activation as the
kernels round), at --check-tokens; a wrong Marlin layout shows as an error near 1.4.

vLLM 0.18 (the measured rows) vs 0.24 (the library timed here): marlin_moe_wna16/ops.cu is the same code
ported to torch's stable ABI (TORCH_CHECK -> STD_TORCH_CHECK, torch::empty -> new_empty): the thread configs
(small batch 128x128 with 256 threads, then 64x128 and 128x64 with 128; large batch 64x256 with 256, then
the same two), `determine_exec_config` and its blocks-per-SM rule, and the c_tmp and workspace sizes are
unchanged; generate_kernels.py builds the same bf16 x e2m1 x e8m0 instances (group_blocks 2, m blocks 0.5 to
4, 4 stages) and adds MXFP8 ones; marlin_template.h changes only NVFP4's global scale (fp32, applied in
fp32), fp16 accumulation (fp16 activations only) and writes "8-bit scale" where 0.18 wrote "FP4 weight" in
the scale strides, which for MXFP4 evaluates the same; the Marlin headers (marlin.cuh, dequant.h,
marlin_mma.h, marlin_dtypes.cuh) are unchanged; in Python fused_marlin_moe, its block_size_m rule,
moe_align_block_size, the weight prep and the padding are unchanged; topk_softmax gained NaN guards. So the
GEMMs should time the same; what can differ is the compiler (0.24's wheel is built with CUDA 13; the 0.18
build the rows ran may have used another) and small host costs.

    python scripts/time_vllm_marlin_moe.py --moe-lib DIR/vllm/_moe_C_stable_libtorch.abi3.so \
        --out moe_marlin.csv [--shapes 1:1 8:1 2:1 4:1] [--tokens 1 2 4 ...] [--stages moe_graph ...] \
        [--check-tokens 4 1024] [--budget-s 420] [--warmup-ms 100]
    python scripts/time_vllm_marlin_moe.py --dry-run [--shapes ...] [--tokens ...]   # no GPU, no library

Needs torch 2.11 built for CUDA 13 (the library's stable ABI and libcudart.so.13, which `import torch` loads;
if the loader still misses it the script preloads the one under site-packages/nvidia), triton, and the .so
(from the wheel, never committed). --dry-run needs only torch (any build): it prints every row's padded
shapes, block_size_m, buffers and each TP's tensors and memory, and runs the layout code on a small CPU
problem.
"""

import argparse
import csv
import ctypes
import hashlib
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

try:  # --dry-run needs neither triton nor a GPU
    import triton
    import triton.language as tl
    from kernel_timing import bench, graphed, host_time
except ImportError:
    triton = tl = None

# openai/gpt-oss-120b config.json: experts, top-k, hidden, moe intermediate before the TP split
EXPERTS, TOPK, HIDDEN, INTER = 128, 4, 2880, 2880
MX_BLOCK = 32  # values per e8m0 scale
# Marlin on CUDA: 0.24 mxfp4_round_up_hidden_size_and_intermediate_size, 0.18 Mxfp4MoEMethod.create_weights
HIDDEN_PAD, INTER_PAD = 256, 128
SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0  # swigluoai_and_mul's defaults, which MoEActivation.SWIGLUOAI uses
BLOCK_SIZES_M = (8, 16, 32, 48, 64)  # fused_marlin_moe's block_size_m candidates
MAX_THREAD_N = 256  # marlin.cuh, sizes the fp32 reduce buffer (c_tmp)
SCALE_BYTES = (122, 125)  # e8m0 bytes drawn from [122, 125): 2^-5 .. 2^-3
ACT_BLOCK = 1024  # columns per program of the activation kernel
H200_SMS = 132  # for --dry-run's buffer sizes only; the run asks the device
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
STAGES = ("pad", "routing", "align", "gate_up", "act", "down", "sum", "moe")
GRAPH_STAGES = tuple(f"{s}_graph" for s in STAGES)
HOST_STAGES = ("gate_up_host", "moe_host")
OPS = ("topk_softmax", "moe_align_block_size", "moe_wna16_marlin_gemm", "moe_sum")
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
FIELDS = [
    "vllm", "tp", "ep", "experts", "topk", "hidden", "inter", "inter_padded", "tokens", "stage", "latency_us",
    "p10_us", "p90_us", "check_rel_err", "hidden_padded", "block_size_m", "sorted_len",
]  # fmt: skip


def say(*args) -> None:
    print(*args, flush=True)


def scalar_type_id(exponent: int, mantissa: int, signed: bool, bias: int, finite_only: bool, nan: int) -> int:
    """vLLM's ScalarType.id (scalar_type.py, csrc/core/scalar_type.hpp): exponent, mantissa, signed, bias,
    finite-values-only and NaN representation packed from the low bits in 8, 8, 1, 32, 1 and 8 bits."""
    fields = ((exponent, 8), (mantissa, 8), (int(signed), 1), (bias, 32), (int(finite_only), 1), (nan, 8))
    value = offset = 0
    for field, bits in fields:
        value |= (field & ((1 << bits) - 1)) << offset
        offset += bits
    return value


# scalar_types.float4_e2m1f = ScalarType.float_(2, 1, True, NanRepr.NONE): signed, finite only, no NaN (0)
FE2M1F_ID = scalar_type_id(2, 1, True, 0, True, 0)
# marlin_permute_scales for grouped scales (get_scale_perms' scale_perm): each 64 values as an 8x8 transpose
SCALE_PERM = torch.arange(64).view(8, 8).t().flatten()
# marlin_permute_bias (get_scale_perms' scale_perm_single), each 32 values
BIAS_PERM = torch.tensor([2 * i + j for i in range(4) for j in (0, 1, 8, 9, 16, 17, 24, 25)])


def marlin_tile_perm() -> torch.Tensor:
    """The order of each 1024 4-bit values of a row of Marlin 16x16 tiles (get_weight_perm(4) of vLLM's
    marlin_utils_test.py, which vLLM's tests check gptq_marlin_repack against)."""
    order: list[int] = []
    for i in range(32):
        rows = (2 * (i % 4), 2 * (i % 4) + 1, 2 * (i % 4 + 4), 2 * (i % 4 + 4) + 1)
        one = [16 * r + i // 4 + 8 * b for b in (0, 1) for r in rows]
        order += [p + 256 * j for j in range(4) for p in one]
    return torch.tensor(order).view(-1, 8)[:, [0, 2, 4, 6, 1, 3, 5, 7]].flatten()


def nibbles(packed: torch.Tensor) -> torch.Tensor:
    """(..., K/2) uint8 holding two e2m1 codes a byte, the first in the low nibble (the checkpoint's packing)
    -> (..., K) codes."""
    return torch.stack((packed & 0xF, packed >> 4), -1).flatten(-2)


def marlin_weights(packed: torch.Tensor) -> torch.Tensor:
    """(E, N, K/2) checkpoint-layout e2m1 bytes -> (E, K/16, 2N) int32, as prepare_moe_fp4_layer_for_marlin's
    gptq_marlin_repack(num_bits=4) lays them out: each expert's (K, N) codes cut in 16x16 tiles, a row of
    tiles side by side, each 1024 values in the tile order, 8 codes to an int32 (the first in the low
    bits)."""
    e, n, k = packed.shape[0], packed.shape[1], packed.shape[2] * 2
    codes = nibbles(packed).transpose(1, 2)  # (E, K, N)
    tiles = codes.reshape(e, k // 16, 16, n // 16, 16).permute(0, 1, 3, 2, 4).reshape(e, -1, 1024)
    tiles = tiles[:, :, marlin_tile_perm().to(packed.device)].reshape(e, k // 16, 2 * n, 8)
    pairs = (tiles[..., 0::2] | (tiles[..., 1::2] << 4)).contiguous()  # 4 bytes an int32, little-endian
    return pairs.view(torch.int32).reshape(e, k // 16, 2 * n)


def marlin_scales(raw: torch.Tensor) -> torch.Tensor:
    """(E, N, K/32) e8m0 bytes -> (E, K/32, N) float8_e8m0fnu as prepare_moe_fp4_layer_for_marlin leaves
    them: transposed, marlin_permute_scales' order of each 64, then mxfp4_marlin_process_scales' [0, 2, 1, 3]
    of each 4 (16-bit activations). vLLM permutes them as bf16; powers of two make that the same bytes."""
    e, n, groups = raw.shape
    s = raw.transpose(1, 2).reshape(e, -1, 64)[:, :, SCALE_PERM.to(raw.device)]
    s = s.reshape(e, -1, 4)[:, :, [0, 2, 1, 3]]
    return s.reshape(e, groups, n).contiguous().view(torch.float8_e8m0fnu)


def marlin_bias(bias: torch.Tensor) -> torch.Tensor:
    """(E, N) bf16 -> the same in marlin_permute_bias' order."""
    e, n = bias.shape
    return bias.reshape(e, -1, 32)[:, :, BIAS_PERM.to(bias.device)].reshape(e, n).contiguous()


def dequant(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """One expert's (N, K) weight in fp32 from its (N, K/2) e2m1 bytes and (N, K/32) e8m0 bytes."""
    lut = torch.tensor(E2M1 + [-v for v in E2M1], device=packed.device)
    return lut[nibbles(packed).long()] * torch.exp2(scales.float() - 127).repeat_interleave(MX_BLOCK, -1)


def round_up(x: int, y: int) -> int:
    return (x + y - 1) // y * y


def padded_sizes(tp: int) -> tuple[int, int, int]:
    """The rank's intermediate before and after vLLM's Marlin padding, and the padded hidden size."""
    inter = INTER // tp  # FusedMoEConfig: intermediate_size // tp_size
    return inter, round_up(inter, INTER_PAD), round_up(HIDDEN, HIDDEN_PAD)


def block_size_m(tokens: int) -> int:
    """fused_marlin_moe's rule (16-bit activations): the first block size that expects under 0.9 blocks of
    rows per expert, else the largest."""
    for block in BLOCK_SIZES_M:
        if tokens * TOPK / EXPERTS / block < 0.9:
            return block
    return BLOCK_SIZES_M[-1]


def align_sizes(tokens: int, block: int) -> tuple[int, int]:
    """moe_align_block_size.py's buffer lengths: the sorted ids and the expert ids (one per block)."""
    numel = tokens * TOPK
    sorted_len = numel + EXPERTS * (block - 1)
    if numel < EXPERTS:
        sorted_len = min(numel * block, sorted_len)
    return sorted_len, -(-sorted_len // block)


def layer_tensors(n: int, k: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """The layer's tensors: what moe_wna16_marlin_gemm gets (vLLM's after prepare_moe_fp4_layer_for_marlin;
    params_dtype bf16 for the biases) and the checkpoint-layout copies kept for the check."""
    return {
        "w13": ((EXPERTS, k // 16, 2 * 2 * n), torch.int32),
        "w13_scale": ((EXPERTS, k // MX_BLOCK, 2 * n), torch.float8_e8m0fnu),
        "w13_bias": ((EXPERTS, 2 * n), torch.bfloat16),
        "w2": ((EXPERTS, n // 16, 2 * k), torch.int32),
        "w2_scale": ((EXPERTS, n // MX_BLOCK, k), torch.float8_e8m0fnu),
        "w2_bias": ((EXPERTS, k), torch.bfloat16),
        "w13 checkpoint": ((EXPERTS, 2 * n, k // 2), torch.uint8),
        "w13_scale checkpoint": ((EXPERTS, 2 * n, k // MX_BLOCK), torch.uint8),
        "w2 checkpoint": ((EXPERTS, k, n // 2), torch.uint8),
        "w2_scale checkpoint": ((EXPERTS, k, n // MX_BLOCK), torch.uint8),
    }


def run_buffers(m: int, n: int, k: int, sms: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """One token count's buffers: fused_marlin_moe's caches (cache1 and cache3 share one), the align outputs,
    and the fp32 reduce buffer each GEMM allocates (ops.cu: min(size_n x sorted ids, SMs x 4 x block x 256),
    doubled for block 8)."""
    block = block_size_m(m)
    sorted_len, blocks = align_sizes(m, block)
    rows = m * TOPK

    def c_tmp(size_n: int) -> int:
        return min(size_n * sorted_len, sms * 4 * block * MAX_THREAD_N) * (2 if block == 8 else 1)

    return {
        "x_padded": ((m, k), torch.bfloat16),
        "topk_weights": ((m, TOPK), torch.float32),
        "topk_ids": ((m, TOPK), torch.int32),
        "sorted_token_ids": ((sorted_len,), torch.int32),
        "expert_ids": ((blocks,), torch.int32),
        "cache13": ((rows * max(2 * n, k),), torch.bfloat16),
        "cache2": ((rows, n), torch.bfloat16),
        "fused_out": ((m, k), torch.bfloat16),
        "c_tmp gate_up": ((c_tmp(2 * n),), torch.float32),
        "c_tmp down": ((c_tmp(k),), torch.float32),
    }


def nbytes(spec: tuple[tuple[int, ...], torch.dtype]) -> int:
    shape, dtype = spec
    count = 1
    for d in shape:
        count *= d
    return count * dtype.itemsize


if triton is not None:

    @triton.jit
    def _swigluoai_kernel(x_ptr, out_ptr, d, alpha, limit, BLOCK: tl.constexpr):
        """vLLM's swigluoai_and_mul: x holds each row's gate/up pairs interleaved, out = (clamp(up, -limit,
        limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit), in fp32."""
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < d
        gate = tl.load(x_ptr + row * 2 * d + 2 * cols, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(x_ptr + row * 2 * d + 2 * cols + 1, mask=mask, other=0.0).to(tl.float32)
        g = tl.minimum(gate, limit)
        u = tl.minimum(tl.maximum(up, -limit), limit)
        y = (u + 1.0) * g / (1.0 + tl.exp(-g * alpha))
        tl.store(out_ptr + row * d + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def swigluoai(x: torch.Tensor, out: torch.Tensor) -> None:
    """(rows, 2d) interleaved gate/up -> (rows, d), one launch."""
    rows, d = out.shape
    _swigluoai_kernel[(rows, triton.cdiv(d, ACT_BLOCK))](
        x, out, d, SWIGLU_ALPHA, SWIGLU_LIMIT, BLOCK=ACT_BLOCK
    )


def find_cudart() -> Path | None:
    """libcudart.so.13 of the nvidia-cuda-runtime wheel that torch cu130 depends on, if installed."""
    site = Path(torch.__file__).resolve().parents[1]
    found = sorted(site.glob("nvidia/**/libcudart.so.13*"))
    return found[0] if found else None


def load_moe_ops(path: Path):
    """vLLM's compiled MoE ops (torch.ops._moe_C after loading the library)."""
    if not path.is_file():
        sys.exit(
            f"--moe-lib {path}: no such file (vllm/_moe_C_stable_libtorch.abi3.so of the vLLM 0.24.0 wheel)"
        )
    try:
        torch.ops.load_library(str(path))
    except OSError as exc:
        cudart = find_cudart()
        torch_lib = Path(torch.__file__).resolve().parent / "lib"
        if cudart is None:
            sys.exit(
                f"{path}: {exc}\n  put torch's {torch_lib} and libcudart.so.13's directory on LD_LIBRARY_PATH"
            )
        say(f"loading {path} failed ({exc}); preloading {cudart} and trying again")
        ctypes.CDLL(str(cudart), mode=ctypes.RTLD_GLOBAL)
        try:
            torch.ops.load_library(str(path))
        except OSError as exc2:
            sys.exit(f"{path}: {exc2}\n  run with LD_LIBRARY_PATH={torch_lib}:{cudart.parent}")
    ops = torch.ops._moe_C
    missing = [name for name in OPS if not hasattr(ops, name)]
    if missing:
        sys.exit(
            f"{path}: torch.ops._moe_C has no {missing}; not vLLM's _moe_C library (0.24 registers them)"
        )
    return ops


class Layer:
    """One gpt-oss MoE layer's weights as vLLM's Marlin backend holds them, and their checkpoint-layout
    originals (random) for the check."""

    def __init__(self, tp: int, dev, chunk: int = 16):
        self.inter, self.n, self.k = padded_sizes(tp)
        n, k = self.n, self.k
        spec = layer_tensors(n, k)

        def rand_bytes(name: str, lo: int = 0, hi: int = 256) -> torch.Tensor:
            return torch.randint(lo, hi, spec[name][0], dtype=torch.uint8, device=dev)

        self.w1_raw = rand_bytes("w13 checkpoint")
        self.w1s_raw = rand_bytes("w13_scale checkpoint", *SCALE_BYTES)
        self.w2_raw = rand_bytes("w2 checkpoint")
        self.w2s_raw = rand_bytes("w2_scale checkpoint", *SCALE_BYTES)
        self.b1_raw = (torch.randn(spec["w13_bias"][0], device=dev) * 0.1).bfloat16()
        self.b2_raw = (torch.randn(spec["w2_bias"][0], device=dev) * 0.1).bfloat16()
        self.w1 = self.convert(marlin_weights, self.w1_raw, spec["w13"], chunk)
        self.w2 = self.convert(marlin_weights, self.w2_raw, spec["w2"], chunk)
        self.w1s = self.convert(marlin_scales, self.w1s_raw, spec["w13_scale"], chunk)
        self.w2s = self.convert(marlin_scales, self.w2s_raw, spec["w2_scale"], chunk)
        self.b1, self.b2 = marlin_bias(self.b1_raw), marlin_bias(self.b2_raw)
        for name, t in (("w13_bias", self.b1), ("w2_bias", self.b2)):
            if (tuple(t.shape), t.dtype) != spec[name]:
                raise RuntimeError(f"{name}: {tuple(t.shape)} {t.dtype}, expected {spec[name]}")

    @staticmethod
    def convert(fn, raw: torch.Tensor, spec: tuple[tuple[int, ...], torch.dtype], chunk: int) -> torch.Tensor:
        """fn over the experts a chunk at a time (bounds the staging memory), into the spec's tensor (filled
        as bytes: float8_e8m0fnu has few kernels, a view of it does not need one)."""
        out = torch.empty(spec[0], dtype=spec[1], device=raw.device)
        for i in range(0, raw.shape[0], chunk):
            part = fn(raw[i : i + chunk])
            if tuple(part.shape[1:]) != spec[0][1:] or part.dtype != spec[1]:
                raise RuntimeError(f"{fn.__name__}: {tuple(part.shape)} {part.dtype}, expected {spec}")
            out.view(torch.uint8)[i : i + chunk] = part.view(torch.uint8)
        return out


class Run:
    """Buffers for one token count, and the layer's forward split into vLLM's calls."""

    def __init__(self, ops, layer: Layer, m: int, dev, sms: int):
        self.ops, self.L, self.m, self.dev, self.sms = ops, layer, m, dev, sms
        self.block = block_size_m(m)
        self.sorted_len, self.blocks = align_sizes(m, self.block)
        spec = run_buffers(m, layer.n, layer.k, sms)
        self.x = torch.randn(m, HIDDEN, device=dev, dtype=torch.bfloat16)
        self.logits = torch.randn(m, EXPERTS, device=dev, dtype=torch.bfloat16)
        self.xp = self.pad()
        self.topk_w, self.topk_ids, _ = self.routing()
        self.route = (self.topk_w, *self.align())  # weights, sorted ids, expert ids, padded count
        self.workspace = torch.zeros(sms * 4, dtype=torch.int32, device=dev)
        rows = m * TOPK
        self.cache13 = torch.empty(spec["cache13"][0], dtype=torch.bfloat16, device=dev)
        self.cache1 = self.cache13[: rows * 2 * layer.n].view(rows, 2 * layer.n)
        self.cache3 = self.cache13[: rows * layer.k].view(rows, layer.k)
        self.cache2 = torch.empty(spec["cache2"][0], dtype=torch.bfloat16, device=dev)
        self.fused_out = torch.empty(spec["fused_out"][0], dtype=torch.bfloat16, device=dev)
        # once through in order, so that every stage timed alone reads what the one before it wrote
        self.gate_up()
        self.act()
        self.down()
        self.sum()
        torch.cuda.synchronize()

    def pad(self) -> torch.Tensor:
        return F.pad(self.x, (0, self.L.k - HIDDEN))

    def routing(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """fused_topk: weights, ids (int32: no all-to-all asks for another dtype), token-expert indices."""
        w = torch.empty(self.m, TOPK, dtype=torch.float32, device=self.dev)
        ids = torch.empty(self.m, TOPK, dtype=torch.int32, device=self.dev)
        tok = torch.empty(self.m, TOPK, dtype=torch.int32, device=self.dev)
        self.ops.topk_softmax(w, ids, tok, self.logits, True, None)  # renormalize=True, no correction bias
        return w, ids, tok

    def align(self, topk_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """moe_align_block_size.py with ignore_invalid_experts=True and no expert map."""
        ids = self.topk_ids if topk_ids is None else topk_ids
        sorted_ids = torch.empty(self.sorted_len, dtype=torch.int32, device=self.dev)
        expert_ids = torch.empty(self.blocks, dtype=torch.int32, device=self.dev)
        ntp = torch.empty(1, dtype=torch.int32, device=self.dev)
        self.ops.moe_align_block_size(ids, EXPERTS, self.block, sorted_ids, expert_ids, ntp, None)
        return sorted_ids, expert_ids, ntp

    def _gemm(self, a, c, w, bias, scales, route, workspace, top_k, mul_topk_weights, size_m, size_n, size_k):
        """moe_wna16_marlin_gemm as _fused_marlin_moe calls it: no activation scales, global scale, zero
        points or act-order; is_k_full, no atomic add, fp32 reduce, no float zero points; auto thread config
        (the three -1s: thread_k, thread_n, blocks_per_sm)."""
        topk_w, sorted_ids, expert_ids, ntp = route
        self.ops.moe_wna16_marlin_gemm(
            a, c, w, bias, scales, None, None, None, None, None, workspace, sorted_ids, expert_ids, ntp,
            topk_w, self.block, top_k, mul_topk_weights, FE2M1F_ID, size_m, size_n, size_k,
            True, False, True, False, -1, -1, -1,
        )  # fmt: skip

    def _gate_up(self, xp, route, workspace) -> None:
        """The first call: tokens rows each gathered for its 4 experts, bias, routing weights not applied."""
        L = self.L
        self._gemm(xp, self.cache1, L.w1, L.b1, L.w1s, route, workspace, TOPK, False, self.m, 2 * L.n, L.k)

    def _down(self, route, workspace) -> None:
        """The second call: the tokens x 4 rows (top_k 1), bias, then the routing weight in the epilogue."""
        L = self.L
        self._gemm(
            self.cache2, self.cache3, L.w2, L.b2, L.w2s, route, workspace, 1, True, self.m * TOPK, L.k, L.n
        )

    def gate_up(self) -> None:
        self._gate_up(self.xp, self.route, self.workspace)

    def act(self) -> None:
        swigluoai(self.cache1, self.cache2)

    def down(self) -> None:
        self._down(self.route, self.workspace)

    def sum(self) -> None:
        self.ops.moe_sum(self.cache3.view(self.m, TOPK, self.L.k), self.fused_out)

    def moe(self) -> torch.Tensor:
        """The layer as vLLM runs it: pad, routing, fused_marlin_moe (a fresh lock workspace per call, the
        modular kernel's persistent caches), the copy into the layer's output, the slice back to 2880."""
        xp = self.pad()
        topk_w, topk_ids, _ = self.routing()
        sorted_ids, expert_ids, ntp = self.align(topk_ids)
        workspace = torch.zeros(self.sms * 4, dtype=torch.int32, device=self.dev)
        route = (topk_w, sorted_ids, expert_ids, ntp)
        self._gate_up(xp, route, workspace)
        self.act()
        self._down(route, workspace)
        self.sum()
        out = torch.empty_like(xp)
        out.copy_(self.fused_out)
        return out[:, :HIDDEN]

    def check(self) -> tuple[float, str]:
        """Relative error of moe() against an fp32 product of the dequantised checkpoint-layout weights (the
        routing taken from topk_softmax, itself compared with torch), and what else was seen."""
        out = self.moe().float()
        torch.cuda.synchronize()
        L = self.L
        ids, w = self.topk_ids.long(), self.topk_w
        chosen = self.logits.float().gather(1, ids)
        route_err = (torch.softmax(chosen, -1) - w).abs().max().item()
        kth = self.logits.float().topk(TOPK, dim=1).values[:, -1:]
        not_top = (chosen < kth).any(1).sum().item()
        distinct = all(len(set(r)) == TOPK for r in ids.tolist())
        xp = self.xp.float()
        ref = torch.zeros(self.m, L.k, device=self.dev)
        for e in ids.unique().tolist():
            tok, slot = (ids == e).nonzero(as_tuple=True)
            h = (xp[tok] @ dequant(L.w1_raw[e], L.w1s_raw[e]).T).bfloat16().float() + L.b1_raw[e].float()
            h = h.bfloat16().float()  # the GEMM's bf16 output, bias added in bf16
            g, up = h[:, 0::2].clamp(max=SWIGLU_LIMIT), h[:, 1::2].clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT)
            a = ((up + 1) * g * torch.sigmoid(SWIGLU_ALPHA * g)).bfloat16().float()
            y = a @ dequant(L.w2_raw[e], L.w2s_raw[e]).T + L.b2_raw[e].float()
            ref.index_add_(0, tok, w[tok, slot].unsqueeze(1) * y)
        ref = ref[:, :HIDDEN]
        err = ((out - ref).norm() / ref.norm()).item()
        notes = (
            f"finite={bool(torch.isfinite(out).all())} nonzero={bool(out.abs().sum() > 0)} "
            f"routing: weight err {route_err:.1e}, distinct ids {distinct}, tokens off the top 4 {not_top}"
        )
        return err, notes


def measure(run: Run, stage: str, warmup_ms: float) -> tuple[float, float, float]:
    if stage.endswith("_host"):
        return host_time(getattr(run, stage.removesuffix("_host")))
    name = stage.removesuffix("_graph")
    fn = graphed(getattr(run, name)) if name != stage else getattr(run, stage)
    return bench(fn, warmup_ms)


def parse_shapes(shapes: list[str]) -> list[int]:
    """The TPs of --shapes' TP:EP pairs (EP 1 only)."""
    tps = []
    for shape in shapes:
        tp, ep = (int(x) for x in shape.split(":"))
        if ep != 1:
            sys.exit(
                f"--shapes {shape}: EP > 1 is not modelled here (vLLM maps ids with an expert map first)"
            )
        if tp < 1 or INTER % tp:
            sys.exit(f"--shapes {shape}: TP must divide the intermediate size {INTER}")
        tps.append(tp)
    return tps


def self_test_layouts() -> None:
    """The layout code on a small CPU problem: shapes, dtypes, and the tile order a permutation."""
    perm = marlin_tile_perm()
    if sorted(perm.tolist()) != list(range(1024)):
        raise RuntimeError("marlin_tile_perm is not a permutation of 0..1023")
    e, n, k = 2, 128, 256
    raw = torch.randint(0, 256, (e, n, k // 2), dtype=torch.uint8)
    w = marlin_weights(raw)
    s = marlin_scales(torch.randint(*SCALE_BYTES, (e, n, k // MX_BLOCK), dtype=torch.uint8))
    b = marlin_bias(torch.randn(e, n).bfloat16())
    got = [(tuple(t.shape), t.dtype) for t in (w, s, b)]
    want = [
        ((e, k // 16, 2 * n), torch.int32),
        ((e, k // MX_BLOCK, n), torch.float8_e8m0fnu),
        ((e, n), torch.bfloat16),
    ]
    if got != want:
        raise RuntimeError(f"layouts: {got}, expected {want}")
    # every code lands once: the multiset of codes is kept by the repack
    codes_in = torch.bincount(nibbles(raw).flatten().long(), minlength=16)
    codes_out = torch.bincount(nibbles(w.contiguous().view(torch.uint8)).flatten().long(), minlength=16)
    if not torch.equal(codes_in, codes_out):
        raise RuntimeError("marlin_weights lost or duplicated codes")
    ref = dequant(raw[0], torch.full((n, k // MX_BLOCK), 127, dtype=torch.uint8))
    if ref.shape != (n, k):
        raise RuntimeError(f"dequant: {tuple(ref.shape)}, expected {(n, k)}")
    say(f"layout self-test on CPU (E={e}, N={n}, K={k}): ok; float4_e2m1f id {FE2M1F_ID} ({FE2M1F_ID:#x})")


def fmt(spec: tuple[tuple[int, ...], torch.dtype]) -> str:
    return f"{'x'.join(str(d) for d in spec[0])} {str(spec[1]).removeprefix('torch.')}"


def dry_run(args) -> None:
    """Every row's shapes and buffers, each TP's tensors and memory; no GPU, no library."""
    self_test_layouts()
    for tp in parse_shapes(args.shapes):
        inter, n, k = padded_sizes(tp)
        spec = layer_tensors(n, k)
        kernel_bytes = sum(nbytes(v) for name, v in spec.items() if "checkpoint" not in name)
        copy_bytes = sum(nbytes(v) for name, v in spec.items() if "checkpoint" in name)
        say(
            f"\ntp{tp} ep1: hidden {HIDDEN} -> {k}, inter {inter} -> {n}; gate_up MNK = tokens x {2 * n} x "
            f"{k}, down MNK = tokens*4 x {k} x {n}; weights {kernel_bytes / 2**30:.3f} GiB + checkpoint "
            f"copies {copy_bytes / 2**30:.3f} GiB"
        )
        for name, v in spec.items():
            say(f"  {name:22s} {fmt(v):28s} {nbytes(v) / 2**20:9.1f} MiB")
        for m in args.tokens:
            buf = run_buffers(m, n, k, H200_SMS)
            block = block_size_m(m)
            sorted_len, blocks = align_sizes(m, block)
            total = sum(nbytes(v) for v in buf.values())
            say(
                f"  tp{tp} M={m:5d} block_size_m={block:2d} sorted_ids={sorted_len} expert_blocks={blocks} "
                f"cache13 {fmt(buf['cache13'])}, cache2 {fmt(buf['cache2'])}, c_tmp "
                f"{buf['c_tmp gate_up'][0][0]}/{buf['c_tmp down'][0][0]} fp32; buffers "
                f"{total / 2**20:.1f} MiB (SMs {H200_SMS})"
            )


def summary(rows: list[dict]) -> None:
    """moe_graph and the two GEMMs' graph times by tokens x TP."""
    tps = sorted({r["tp"] for r in rows})
    tokens = sorted({r["tokens"] for r in rows})
    table = {(r["tp"], r["tokens"], r["stage"]): r["latency_us"] for r in rows}
    for title, stages in (
        ("moe_graph", ("moe_graph",)),
        ("gate_up_graph + down_graph", ("gate_up_graph", "down_graph")),
    ):
        say(f"\n{title} (us)\n{'tokens':>8s}" + "".join(f"{'tp' + str(tp):>10s}" for tp in tps))
        for m in tokens:
            cells = []
            for tp in tps:
                vals = [table.get((tp, m, s)) for s in stages]
                cells.append(f"{sum(vals):10.1f}" if all(v is not None for v in vals) else f"{'-':>10s}")
            say(f"{m:8d}" + "".join(cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--moe-lib", type=Path, help="vllm/_moe_C_stable_libtorch.abi3.so of the vLLM 0.24.0 wheel"
    )
    ap.add_argument("--label", default="0.24.0", help="the vLLM version of --moe-lib")
    ap.add_argument("--out", type=Path, help="CSV to write (one row per TP x tokens x stage)")
    ap.add_argument(
        "--shapes", nargs="+", default=["1:1", "8:1", "2:1", "4:1"], help="TP:EP pairs (EP 1 only)"
    )
    ap.add_argument("--tokens", nargs="+", type=int, default=TOKENS)
    ap.add_argument(
        "--stages", nargs="+", default=list(STAGES + GRAPH_STAGES + HOST_STAGES),
        choices=STAGES + GRAPH_STAGES + HOST_STAGES, metavar="STAGE",
        help=f"what to time (default all: {' '.join(STAGES + GRAPH_STAGES + HOST_STAGES)})",
    )  # fmt: skip
    ap.add_argument(
        "--check-tokens", nargs="*", type=int, default=[4, 1024], help="compare with torch at these"
    )
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new rows after this")
    ap.add_argument("--warmup-ms", type=float, default=100.0, help="do_bench warm-up before each timing")
    ap.add_argument("--dry-run", action="store_true", help="print the rows' shapes and memory; no GPU needed")
    args = ap.parse_args()
    if args.dry_run:
        dry_run(args)
        return
    if args.moe_lib is None or args.out is None:
        sys.exit("--moe-lib and --out are required (or --dry-run)")
    if triton is None:
        sys.exit("triton is not importable: it times the stages and runs the activation kernel")
    t0 = time.time()
    tps = parse_shapes(args.shapes)
    dev = torch.device("cuda")
    ops = load_moe_ops(args.moe_lib)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    digest = hashlib.sha256(args.moe_lib.read_bytes()).hexdigest()
    say(
        f"device {torch.cuda.get_device_name()} cap {torch.cuda.get_device_capability()} SMs {sms} torch "
        f"{torch.__version__} cuda {torch.version.cuda} triton {triton.__version__}\n"
        f"moe lib {args.moe_lib.resolve()} sha256 {digest}"
    )
    torch.manual_seed(0)
    rows: list[dict] = []
    with args.out.open("w", newline="") as fh:
        out = csv.DictWriter(fh, FIELDS)
        out.writeheader()
        for tp in tps:
            if time.time() - t0 > args.budget_s:
                say(f"budget spent: stopped before tp{tp}")
                break
            time_tp(args, ops, tp, dev, sms, t0, out, fh, rows)
            torch.cuda.empty_cache()
    summary(rows)
    say(f"done in {time.time() - t0:.0f} s")


def time_tp(args, ops, tp: int, dev, sms: int, t0: float, out, fh, rows: list[dict]) -> None:
    """One TP's layer and every token count's rows, until the budget is spent."""
    t_layer = time.time()
    layer = Layer(tp, dev)
    torch.cuda.synchronize()
    say(
        f"tp{tp}: hidden {layer.k}, inter {layer.inter} -> {layer.n}; weights made in "
        f"{time.time() - t_layer:.1f} s"
    )
    for m in args.tokens:
        if time.time() - t0 > args.budget_s:
            say(f"budget spent: stopped before tp{tp} M={m}")
            return
        run = Run(ops, layer, m, dev, sms)
        err = ""
        if m in args.check_tokens:
            rel, notes = run.check()
            err = f"{rel:.4f}"
            flag = "" if rel < 0.02 else "  <-- MISMATCH: a layout or a call differs from vLLM's"
            say(f"tp{tp} M={m} check: rel err {rel:.4f}; {notes}{flag}")
        for stage in args.stages:
            try:
                lat, p10, p90 = measure(run, stage, args.warmup_ms)
            except Exception as exc:  # record and go on, unless the CUDA context is gone
                say(f"tp{tp} M={m} {stage}: FAILED {type(exc).__name__}: {exc}")
                traceback.print_exc(file=sys.stdout)
                if "CUDA error" in str(exc) or "illegal" in str(exc):
                    raise
                continue
            row = dict(
                vllm=args.label, tp=tp, ep=1, experts=EXPERTS, topk=TOPK, hidden=HIDDEN, inter=layer.inter,
                inter_padded=layer.n, tokens=m, stage=stage, latency_us=round(lat, 3), p10_us=round(p10, 3),
                p90_us=round(p90, 3), check_rel_err=err if stage.startswith("moe") else "",
                hidden_padded=layer.k, block_size_m=run.block, sorted_len=run.sorted_len,
            )  # fmt: skip
            out.writerow(row)
            fh.flush()
            rows.append(row)
            say(
                f"tp{tp} N={layer.n} M={m} block={run.block} {stage}: {lat:.1f} us "
                f"(p10 {p10:.1f}, p90 {p90:.1f})"
            )
        del run


if __name__ == "__main__":
    main()
