"""The kernels vLLM runs where it picks by shape, dtype, GPU and release, each timed in its own tables."""

from servelab.engines.kernels import KernelChoice

DEEPGEMM_MOE = KernelChoice(
    table="vllm-deepgemm",
    op="moe",
    dtypes=frozenset({"fp8_block"}),
    multiple_of=(("hidden", 128), ("inter", 128)),
    since="0.12.0",
    why=(
        "vLLM 0.12 with DeepGEMM installed (its docker images install it) runs block-FP8 (128 x 128) "
        "experts through DeepGemmExperts wherever both GEMMs' N and K are multiples of 128, at every token "
        "count: its "
        "VLLM_USE_DEEP_GEMM_E8M0 default skips the M >= 128 and N > 512 checks (fp8.py, fused_moe.py, "
        "deep_gemm_moe.py of vLLM 0.12.0). It turns DeepGEMM off by default at TP >= 8, which the key cannot "
        "see; Qwen3-235B's TP8 width (192) fails the multiple-of-128 rule anyway."
    ),
)

MARLIN_MXFP4_MOE = KernelChoice(
    table="vllm-marlin",
    op="moe",
    dtypes=frozenset({"mxfp4"}),
    compute_capabilities=frozenset({90}),
    why=(
        "vLLM on Hopper runs MXFP4 experts (gpt-oss) through its Marlin W4A16 kernel when "
        "VLLM_MXFP4_USE_MARLIN=1, which InferenceX's vLLM gpt-oss recipes for H100 and H200 set from vLLM "
        "0.13 on (InferenceX 4e52ed4c6, 'Fix H100/H200 perf regression'), and before vLLM vendored "
        "triton_kernels "
        "whenever that package was absent (mxfp4.py `get_mxfp4_backend`, vLLM 0.10.2 and 0.18.0); vLLM 0.12+ "
        "defaults to triton_kernels otherwise. Only Hopper has this table: other systems keep the roofline "
        "(Blackwell runs FlashInfer's MXFP4 kernels)."
    ),
)

MARLIN_FP4_MOE = KernelChoice(
    table="vllm-marlin",
    op="moe",
    dtypes=frozenset({"fp4"}),
    compute_capabilities=frozenset({90}),
    since="0.24.0",
    why=(
        "DeepSeek-V4's FP4 experts on Hopper: vLLM 0.25's select_deepseek_v4_mxfp4_moe_backend "
        "(fused_moe/oracle/mxfp4.py) passes DeepGEMM-MXFP4 and TensorRT-LLM kernels (Blackwell) on SM90, "
        "and runs moe_wna16_marlin_gemm, the MXFP4 entry's kernel (docs/collect.md, Engine kernels)."
    ),
)

MARLIN_INT4_MOE = KernelChoice(
    table="vllm-marlin",
    op="moe",
    dtypes=frozenset({"int4"}),
    compute_capabilities=frozenset({90}),
    why=(
        "Kimi-K2's INT4 weight-only experts (compressed-tensors W4A16, group 32) on Hopper: vLLM 0.16's "
        "CompressedTensorsWNA16MarlinMoEMethod (compressed_tensors_moe.py) runs fused_marlin_moe, "
        "moe_wna16_marlin_gemm on uint4b8 weights with bf16 scales, wherever the hidden size is a multiple "
        "of 128 and the rank's intermediate of 64 (check_moe_marlin_supports_layer); FlashInfer's MXINT4 "
        "kernel is SM100's only (is_flashinfer_mxint4_moe_available), and vLLM 0.25's WNA16 oracle "
        "(fused_moe/oracle/int_wna16.py) passes it and runs the same Marlin path. The kernel's source "
        "(csrc/moe/marlin_moe_wna16 in 0.16.0, csrc/libtorch_stable/moe/marlin_moe_wna16 in 0.25.0) differs "
        "for these types only in the down GEMM's routing-weight multiply (fp32 before bf16), so the 0.25.0 "
        "library's rows answer for 0.16. Blackwell keeps the roofline: vLLM 0.15.1 runs the same Marlin "
        "path there (it has no MXINT4 backend and reads no VLLM_USE_FLASHINFER_MOE_INT4), 0.16 on runs "
        "FlashInfer's MXINT4 kernel where that variable is set (InferenceX's B200 INT4 script sets it from "
        "2026-03-24), and no table times either on Blackwell."
    ),
)

CUTLASS_BLOCK_FP8_GEMM = KernelChoice(
    table="vllm-cutlass",
    op="gemm",
    dtypes=frozenset({"fp8_block"}),
    multiple_of=(("n", 16), ("k", 16)),
    compute_capabilities=frozenset({90, 100, 103, 120}),
    since="0.25.0",
    why=(
        "vLLM 0.25's W8A8 block-FP8 linear layers (128 x 128 weight blocks, 1 x 128 activation groups) pick "
        "the first supported of _POSSIBLE_FP8_BLOCK_KERNELS (model_executor/kernels/linear/__init__.py): the "
        "FlashInfer + DeepGEMM and DeepGEMM kernels need DeepGEMM, so without it "
        "CutlassFp8BlockScaledMMKernel runs _C's cutlass_scaled_mm wherever _C is built for block FP8 (SM90 "
        "and up) and N and K are multiples of 16 (_custom_ops.py; other shapes take its Triton scaled-mm). "
        "Timed on SM90; carried to Blackwell by the rooflines. DeepSeek-V4 itself needs DeepGEMM in 0.25 "
        "(fp8_einsum for wo_a), with which its linear layers run FlashInfer's SM90 block-scale GEMM below 32 "
        "tokens and DeepGEMM above: the CUTLASS rows stand in for those."
    ),
)

TORCH_LINEAR = KernelChoice(
    table="torch",
    op="gemm",
    dtypes=frozenset({"bf16"}),
    why=(
        "vLLM's unquantized (bf16) linear layers call torch: UnquantizedLinearMethod's "
        "dispatch_unquantized_gemm returns default_unquantized_gemm, torch.nn.functional.linear, on CUDA "
        "(model_executor/layers/utils.py), the LM head included (UnquantizedEmbeddingMethod); the MoE "
        "router's GateLinear runs torch.mm with an fp32 output or F.linear (fused_moe/router/gate_linear.py) "
        "unless a specialised router GEMM fits its exact width. All are cuBLAS, the kernel torch's bf16 rows "
        "time, so those rows answer for vLLM as they are. DeepSeek-V4's mHC weights GEMM runs inside vLLM's "
        "fused TileLang mHC kernel (kernels/mhc/tilelang.py, vLLM 0.25) and DeepGEMM's tf32_hc_prenorm_gemm: "
        "cuBLAS at its key stands in for it."
    ),
)

KERNELS = (
    DEEPGEMM_MOE,
    MARLIN_MXFP4_MOE,
    MARLIN_FP4_MOE,
    MARLIN_INT4_MOE,
    CUTLASS_BLOCK_FP8_GEMM,
    TORCH_LINEAR,
)
