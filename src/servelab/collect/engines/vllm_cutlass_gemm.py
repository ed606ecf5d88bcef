"""vLLM's block-FP8 linear GEMM on Hopper without DeepGEMM: `cutlass_scaled_mm` with 1x128 activation and
128x128 weight block scales, from `_C` of the wheel (loaded with torch.ops.load_library; nothing of vLLM is
imported).

Which kernel vLLM 0.25.0 runs for a W8A8 block-FP8 linear layer on SM90 (Fp8LinearMethod ->
init_fp8_linear_kernel -> choose_scaled_mm_linear_kernel over _POSSIBLE_FP8_BLOCK_KERNELS[CUDA] in
model_executor/kernels/linear/__init__.py): FlashInferFp8DeepGEMMDynamicBlockScaledKernel and
DeepGemmFp8BlockScaledMMKernel need DeepGEMM (is_deep_gemm_supported: VLLM_USE_DEEP_GEMM and has_deep_gemm),
so without it the first that is supported is CutlassFp8BlockScaledMMKernel (kernels/linear/scaled_mm/
cutlass.py; CUTLASS_BLOCK_FP8_SUPPORTED from `_C` cutlass_scaled_mm_supports_block_fp8). Its
apply_block_scaled_mm calls ops.cutlass_scaled_mm(A, B.T, scale_a=As, scale_b=Bs.T) (_custom_ops.py), which
launches torch.ops._C.cutlass_scaled_mm(out, a, b, scale_a, scale_b, None) when N and K are multiples of 16.
Operands as vLLM holds them: A [M, K] fp8 row-major from QuantFP8 with column_major_scales (As [M, K/128]
stored M-major, no padding of M), the weight [N, K] fp8 row-major passed transposed, its scales
[N/128, K/128] fp32 passed transposed, a bf16 output. Timed: that one call, as torch's fp8_block rows time
torch._scaled_mm alone (the activation quantisation is priced as its own op).
"""

import torch

from servelab.collect.ops.common import Unsupported, rand_fp8, rand_scale
from servelab.collect.timing import time_op

BLOCK = 128
LIB = "vllm/_C_stable_libtorch.abi3.so"
BACKEND = "vllm cutlass_scaled_mm (CUTLASS, block-FP8 1x128 / 128x128 scales)"


def operands(m: int, n: int, k: int) -> tuple:
    """(out, a, b, scale_a, scale_b) laid out as CutlassFp8BlockScaledMMKernel passes them."""
    kb, nb = -(-k // BLOCK), -(-n // BLOCK)
    a = rand_fp8(m, k)
    weight = rand_fp8(n, k)
    scale_a = rand_scale(kb, m).t()  # M-major, as QuantFP8(column_major_scales=True) allocates it
    weight_scale = rand_scale(nb, kb)
    out = torch.empty(m, n, dtype=torch.bfloat16, device=a.device)
    return out, a, weight.t(), scale_a, weight_scale.t()


def cutlass_scaled_mm(out, a, b, scale_a, scale_b):
    torch.ops._C.cutlass_scaled_mm(out, a, b, scale_a, scale_b, None)
    return out


def reference(a, b, scale_a, scale_b) -> torch.Tensor:
    """The product in fp32 with every block scale applied (the check on the device)."""
    m, k = a.shape
    n = b.shape[1]
    sa = scale_a.repeat_interleave(BLOCK, dim=1)[:, :k]
    sb = scale_b.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)[:k, :n]
    return (a.float() * sa) @ (b.float() * sb)


def check(m: int = 96, n: int = 512, k: int = 1024) -> float:
    """Largest |relative error| of the kernel against the fp32 reference on one shape."""
    out, a, b, sa, sb = operands(m, n, k)
    got = cutlass_scaled_mm(out, a, b, sa, sb).float()
    want = reference(a, b, sa, sb)
    return float(((got - want).abs().max() / want.abs().max()).item())


def supported(capability: int) -> bool:
    return bool(torch.ops._C.cutlass_scaled_mm_supports_block_fp8(capability))


def bench(key, files) -> dict:
    if files is None:
        raise Unsupported("the CUTLASS block-FP8 entry loads _C from the vLLM wheel: --engine-files")
    if key.n % 16 or key.k % 16:
        # vLLM's cutlass_scaled_mm sends such shapes to its Triton scaled-mm instead
        raise Unsupported(f"N={key.n}, K={key.k}: vLLM runs CUTLASS only where N and K are multiples of 16")
    major, minor = torch.cuda.get_device_capability()
    if not supported(major * 10 + minor):
        raise Unsupported(f"_C says CUTLASS block-FP8 is not built for sm{major}{minor}")
    m, n, k = key.m, key.n, key.k

    def make():
        return operands(m, n, k)

    t = time_op(make, cutlass_scaled_mm, m * k + n * k + 4 * (m + n) * (k // BLOCK))
    t["backend"] = BACKEND
    t["tflops"] = 2.0 * m * n * k / (t["latency_us"] * 1e-6) / 1e12
    return t
