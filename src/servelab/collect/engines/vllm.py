"""vLLM's kernels, as the collector times them without vLLM installed: its compiled libraries loaded from
the wheel (torch.ops.load_library) and its Triton kernels compiled from the wheel's own source files.

Which kernel vLLM runs for which key (its dispatch, by version) is each entry's `runs`; docs/collect.md,
"Engine kernels", lists what vLLM 0.25.0 runs for DeepSeek-V4 on Hopper and what of it loads standalone.
"""

from servelab.collect import estimate
from servelab.collect.engines import Catalogue, KernelEntry
from servelab.collect.engines import plans as p
from servelab.engines import Engine
from servelab.perfdb.keys import Dsv4Context, Gemm, Memory, Moe, OpKey
from servelab.perfdb.ops import DSV4_CONTEXT_OPS, DSV4_GENERATION_OPS, OpName
from servelab.predict.graph import StepShape
from servelab.specs import Parallel

_K = "servelab.collect.engines."
MOE_LIB = "vllm/_moe_C_stable_libtorch.abi3.so"
C_LIB = "vllm/_C_stable_libtorch.abi3.so"
FLASHMLA_LIB = "vllm/_flashmla_C.abi3.so"
FUSED_MOE_SRC = "vllm/model_executor/layers/fused_moe/"
FUSED_MOE_FILES = (
    FUSED_MOE_SRC + "fused_moe.py",
    FUSED_MOE_SRC + "utils.py",
    FUSED_MOE_SRC + "configs/*device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[[]128,128].json",
)
# bf16 experts: the same kernel and rules, the tuned tables without a dtype (H100 and H200)
FUSED_MOE_BF16_FILES = (
    *FUSED_MOE_FILES[:2],
    FUSED_MOE_SRC + "configs/E=*,N=*,device_name=NVIDIA_H100_80GB_HBM3.json",
    FUSED_MOE_SRC + "configs/E=*,N=*,device_name=NVIDIA_H200.json",
)
TP_ONLY = tuple(Parallel(tp=tp) for tp in (1, 2, 4, 8))
# DeepSeek-V4's block-FP8 linear layers: V4-Flash first (the H200 recipes), then V4-Pro, at the recipes'
# TP8 + EP8 with and without DP attention
DSV4_FP8 = ("sgl-project/DeepSeek-V4-Flash-FP8", "sgl-project/DeepSeek-V4-Pro-FP8")


def _fp8_block(key: OpKey) -> bool:
    return isinstance(key, Moe) and key.dtype == "fp8_block"


def _bf16_moe(key: OpKey) -> bool:
    """Unquantised experts: on Hopper vLLM 0.25's unquantised oracle (fused_moe/oracle/unquantized.py) picks
    its Triton experts first, the fused_moe_kernel with no quantisation."""
    return isinstance(key, Moe) and key.dtype == "bf16"


def _mxfp4(key: OpKey) -> bool:
    """MXFP4 experts (gpt-oss), and DeepSeek-V4's FP4 experts (e2m1 with e8m0 scales per 32: MXFP4 too): on
    Hopper vLLM 0.25's MXFP4 oracle (fused_moe/oracle/mxfp4.py) falls through DeepGEMM's and TRT-LLM's
    Blackwell kernels to Marlin (W4A16)."""
    return isinstance(key, Moe) and key.dtype in ("mxfp4", "fp4")


def _int4(key: OpKey) -> bool:
    """INT4 weight-only experts (Kimi-K2's compressed-tensors W4A16, group 32): vLLM 0.16's
    CompressedTensorsWNA16MarlinMoEMethod runs Marlin wherever the shape fits it (FlashInfer's MXINT4 kernel
    only on SM100 with VLLM_USE_FLASHINFER_MOE_INT4=1); vLLM 0.25's WNA16 oracle
    (fused_moe/oracle/int_wna16.py) likewise, past FlashInfer's TensorRT-LLM kernel, which is Blackwell's."""
    return isinstance(key, Moe) and key.dtype == "int4"


def _deepgemm(key: OpKey) -> bool:
    return _fp8_block(key) and isinstance(key, Moe) and key.hidden % 128 == 0 and key.inter % 128 == 0


def _block_gemm(key: OpKey) -> bool:
    return isinstance(key, Gemm) and key.dtype == "fp8_block"


def _any(key: OpKey) -> bool:
    return True


def fused_moe_plan() -> list[OpKey]:
    """DeepSeek-V4-Flash-FP8's experts at the recipes' EP8, then DeepSeek-R1's at small M (TP8, and EP8)."""
    keys = p.moe_keys(
        ("sgl-project/DeepSeek-V4-Flash-FP8",), p.RECIPE_PARALLELS[:1], p.TOKENS, lambda d: True
    )
    keys += p.moe_keys(
        ("deepseek-r1",), (Parallel(tp=8), Parallel(tp=8, ep=8)), p.SMALL_TOKENS, lambda d: True
    )
    return list(dict.fromkeys(k for k in keys if _fp8_block(k)))


# the popular bf16 MoE shapes: Qwen3-30B-A3B at TP1, Qwen3-235B-A22B at TP 1, 2, 4, 8 (expert widths 1536 /
# tp); decode batches dense, prefill sparser, so the run stays within about two minutes on one H100
BF16_MOE_MODELS = (("qwen3-30b-a3b", TP_ONLY[:1]), ("qwen3-235b-a22b", TP_ONLY))
BF16_MOE_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384)


def fused_moe_bf16_plan() -> list[OpKey]:
    """The bf16 experts of the BF16_MOE_MODELS at ep 1, BF16_MOE_TOKENS tokens, uniform routing (moe_keys
    keeps the bf16 ones; a key two models share is planned once)."""
    return list(
        dict.fromkeys(
            k
            for model, pars in BF16_MOE_MODELS
            for k in p.moe_keys((model,), pars, BF16_MOE_TOKENS, "bf16".__eq__)
        )
    )


def marlin_plan() -> list[OpKey]:
    """gpt-oss-120b at TP 1, 2, 4, 8 (the shipped vllm-marlin grid), then DeepSeek-V4-Flash's FP4 experts at
    EP8."""
    keys = p.moe_keys(("gpt-oss-120b",), TP_ONLY, p.TOKENS, lambda d: True)
    keys += p.moe_keys(("deepseek-ai/DeepSeek-V4-Flash",), p.RECIPE_PARALLELS[:1], p.TOKENS, lambda d: True)
    return [k for k in keys if _mxfp4(k)]


# Kimi-K2.5's INT4 experts at InferenceX's vLLM INT4 recipes' TP8 (kimik2.5_int4_{h200,b200}.sh), decode
# batches with the small-M steps the Marlin block size changes at
INT4_MOE_TOKENS = tuple(sorted(set(p.TOKENS) | set(p.SMALL_TOKENS)))


def marlin_int4_plan() -> list[OpKey]:
    """Kimi-K2.5's INT4 experts at TP8, INT4_MOE_TOKENS tokens, uniform routing."""
    keys = p.moe_keys(("moonshotai/Kimi-K2.5",), (Parallel(tp=8),), INT4_MOE_TOKENS, lambda d: True)
    return [k for k in keys if _int4(k)]


def block_gemm_plan() -> list[OpKey]:
    """The block-FP8 GEMM keys DeepSeek-V4's linear layers ask for, at M = 1..16384 tokens per attention
    rank."""
    keys = [
        k for model in DSV4_FP8 for k in p.gemm_keys((model,), p.RECIPE_PARALLELS, p.TOKENS) if _block_gemm(k)
    ]
    return list(dict.fromkeys(keys))


def _memory(key: OpKey) -> bool:
    return isinstance(key, Memory)


def memory_plan() -> list[OpKey]:
    """The bandwidth-bound keys of DeepSeek-V4-Flash's and -Pro's steps at the recipes' parallels: decode
    steps of 1..16384 tokens per attention rank and single-prompt prefill chunks of 128..16384 tokens."""
    shapes = [StepShape(decode_batch=t, decode_kv_len=p.DSV4_DECODE_KV[0]) for t in p.TOKENS]
    shapes += [StepShape(prefill=((t, 0),)) for t in p.TOKENS if t >= 128]
    keys: list[Memory] = [
        k for k in p.asked(DSV4_FP8, p.RECIPE_PARALLELS, shapes, Memory) if isinstance(k, Memory)
    ]
    keys.sort(key=lambda k: (k.kernels, k.bytes))  # asked() already dropped repeats
    return list(keys)


def dsv4_plan() -> list[OpKey]:
    return p.dsv4_context_keys() + p.dsv4_generation_keys()


def dsv4_cost(key: OpKey, roofline) -> float:
    """GPU-seconds: each timed chunk of a context row (its roofline: F(past + new) - F(past)), and the
    FlashMLA call alone where the row is timed in one piece (decode rows always)."""
    setup = estimate.SETUP_S_BY_OP.get(key.op, estimate.SETUP_S)
    if not isinstance(key, Dsv4Context):
        return 2 * estimate.key_seconds(key, roofline)
    pieces = p.dsv4_pieces(key)
    total = 0.0
    for new, past, _ in pieces:
        whole = roofline.latency(key._replace(seq=past + new)).us
        before = roofline.latency(key._replace(seq=past)).us if past else 0.0
        total += estimate.timed_seconds(whole - before, setup)
    return total * (2 if len(pieces) == 1 else 1)


FUSED_MOE = KernelEntry(
    name="fused_moe",
    ops=(OpName.moe,),
    backend=Engine.VLLM.value,
    kernel="vLLM's fused_moe_kernel (Triton) from model_executor/layers/fused_moe/fused_moe.py of the "
    "wheel, with the wheel's tuned H200 block-FP8 configs and default-config rule: gate-up and down "
    "GEMMs on block-FP8 (128 x 128) weights, tokens routed to this rank's experts",
    bench=_K + "vllm_fused_moe:bench",
    runs=_fp8_block,
    plan=fused_moe_plan,
    versions=("0.12", "9999"),
    files=FUSED_MOE_FILES,
    stand_ins="moe_align_block_size and the per-token-group FP8 quantisation of the activations are done "
    "in torch outside the timed region; SiLU-and-mul and the top-k sum (vLLM _C) are not timed",
)

ENTRIES = (
    KernelEntry(
        name="dsv4_flashmla",
        ops=DSV4_CONTEXT_OPS + DSV4_GENERATION_OPS,
        backend=Engine.VLLM.value,
        kernel="DeepSeek-V4 CSA / HCA attention as vLLM runs it on Hopper (DeepseekV4FlashMLAAttention): "
        "FlashMLA's sparse_prefill_fwd over the gathered bf16 compressed + window KV (context) and "
        "sparse_decode_fwd over the paged fp8_ds_mla caches (584 B a token: 448 fp8 + 64 bf16 rope + UE8M0 "
        "scales), with the sink and heads padded to 64 / 128, from _flashmla_C of the vLLM wheel; prompts "
        "longer than vLLM's 8,192-token chunk are prefilled in chunks",
        bench=_K + "vllm_dsv4:bench",
        runs=_any,
        plan=dsv4_plan,
        cost=dsv4_cost,
        versions=("0.20", "9999"),
        files=(FLASHMLA_LIB,),
        libraries=(FLASHMLA_LIB,),
        stand_ins="compressors, lightning indexer and top-k are servelab's Triton / torch kernels "
        "(vLLM's are CuTe DSL, DeepGEMM fp8_fp4_mqa_logits and _C persistent_topk, not loadable "
        "standalone); the q / KV RMSNorm + RoPE + cache insert (vLLM _C) is not timed",
    ),
    FUSED_MOE,
    FUSED_MOE._replace(  # the same kernel on bf16 experts
        name="fused_moe_bf16",
        kernel="vLLM's fused_moe_kernel (Triton) from model_executor/layers/fused_moe/fused_moe.py of the "
        "wheel on bf16 (unquantised) experts, as its unquantised oracle runs them on Hopper: the wheel's "
        "tuned table for the device (no dtype) where it has one, else its default config; gate-up and down "
        "GEMMs, tokens routed to this rank's experts",
        runs=_bf16_moe,
        plan=fused_moe_bf16_plan,
        files=FUSED_MOE_BF16_FILES,
        stand_ins="moe_align_block_size is done in torch outside the timed region; SiLU-and-mul and the "
        "top-k sum (vLLM _C) are not timed",
    ),
    KernelEntry(
        name="marlin_moe",
        ops=(OpName.moe,),
        backend="vllm-marlin",
        kernel="vLLM's Marlin MXFP4 MoE path (fused_marlin_moe; gpt-oss on Hopper with "
        "VLLM_MXFP4_USE_MARLIN=1, DeepSeek-V4's FP4 experts on Hopper): moe_wna16_marlin_gemm for gate-up "
        "and down, moe_align_block_size, from _moe_C of the vLLM wheel; latency: gate-up GEMM + activation + "
        "down GEMM, each replayed from a CUDA graph",
        bench=_K + "vllm_marlin:bench",
        runs=_mxfp4,
        plan=marlin_plan,
        versions=("0.24", "9999"),
        files=(MOE_LIB,),
        libraries=(MOE_LIB,),
        stand_ins="the activation between the GEMMs is one Triton kernel with swigluoai_and_mul's math "
        "(vLLM's is in _C, not carried)",
    ),
    KernelEntry(
        name="marlin_moe_int4",
        ops=(OpName.moe,),
        backend="vllm-marlin",
        kernel="vLLM's Marlin WNA16 MoE path on INT4 experts (fused_marlin_moe; Kimi-K2's compressed-tensors "
        "W4A16): moe_wna16_marlin_gemm with uint4b8 weights and bf16 group-32 scales for gate-up and down, "
        "moe_align_block_size, from _moe_C of the vLLM wheel; latency: gate-up GEMM + activation + down "
        "GEMM, captured together in one CUDA graph",
        bench=_K + "vllm_marlin:bench",
        runs=_int4,
        plan=marlin_int4_plan,
        versions=("0.24", "9999"),
        files=(MOE_LIB,),
        libraries=(MOE_LIB,),
        stand_ins="the activation between the GEMMs is one Triton kernel reading and writing silu_and_mul's "
        "bytes (vLLM's is in _C, not carried)",
    ),
    KernelEntry(
        name="cutlass_block_fp8",
        ops=(OpName.gemm,),
        backend="vllm-cutlass",
        kernel="vLLM's W8A8 block-FP8 linear GEMM on Hopper without DeepGEMM (CutlassFp8BlockScaledMMKernel, "
        "model_executor/kernels/linear/scaled_mm/cutlass.py): cutlass_scaled_mm with 1x128 activation "
        "scales (M-major) and 128x128 weight scales, bf16 out, from _C of the vLLM wheel",
        bench=_K + "vllm_cutlass_gemm:bench",
        runs=_block_gemm,
        plan=block_gemm_plan,
        versions=("0.25", "9999"),
        files=(C_LIB,),
        libraries=(C_LIB,),
        stand_ins="the activations' per-token-group FP8 quantisation (vLLM's QuantFP8) is not timed, as in "
        "torch's fp8_block rows",
    ),
    KernelEntry(
        name="rms_norm",
        ops=(OpName.elementwise,),
        backend=Engine.VLLM.value,
        kernel="vLLM's RMSNorm (_C rms_norm, bf16 rows of up to 4,096 values), one launch per kernel the key "
        "counts, each moving its share of the key's bytes",
        bench=_K + "vllm_rms_norm:bench",
        runs=_memory,
        plan=memory_plan,
        versions=("0.20", "9999"),
        files=(C_LIB,),
        libraries=(C_LIB,),
        stand_ins="stands in for every bandwidth-bound kernel of the step: DeepSeek-V4's TileLang mHC pre / "
        "post (RMSNorm fused in; TileLang is not in the image), the MoE top-k, permute and combine (_moe_C), "
        "the embedding gather",
    ),
    KernelEntry(
        name="deepgemm_moe",
        ops=(OpName.moe,),
        backend="vllm-deepgemm",
        kernel="DeepGemmExperts: DeepGEMM's m_grouped_fp8_gemm_nt_contiguous for both GEMMs with vLLM's "
        "Triton ep_scatter / ep_gather (fused_moe/deep_gemm_utils.py)",
        bench=_K + "runtime:pending",
        runs=_deepgemm,
        plan=lambda: [k for k in fused_moe_plan() if _deepgemm(k)],
        versions=("0.12", "9999"),
        files=(FUSED_MOE_SRC + "deep_gemm_utils.py",),
        needs=("deep_gemm",),
        pending="DeepGEMM is no wheel: it is built on the device (scripts/time_vllm_deepgemm_moe.py times "
        "this path that way); not folded into the collector yet",
    ),
)

CATALOGUE = Catalogue(Engine.VLLM, Engine.VLLM.value, ENTRIES)  # the wheel is vllm's
