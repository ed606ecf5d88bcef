"""Which fused-MoE backend TensorRT-LLM runs a model's experts with, by expert format and GPU.

TensorRT-LLM's `moe_config.backend` AUTO (its `resolve_moe_backend`, tensorrt_llm model_config.py of
1.3.0rc20, as ai-dynamo/aiconfigurator 095f58a `collector/trtllm/collect_moe.py` lines 428-475 cites it and
times it; that source is not readable here): MXFP4 experts (gpt-oss) run TRITON on Hopper (SM 90-99),
TRTLLM (TRTLLMGenFusedMoE) on datacenter Blackwell (SM 100-119) and CUTLASS elsewhere; FP8 block-scale
experts (DeepSeek) run TRTLLM on SM 100 and 103 and CUTLASS elsewhere. InferenceX's gpt-oss recipes set the
same by hand (SemiAnalysisAI/InferenceX 843c625, benchmarks/single_node/fixed_seq_len/deprecated/
gptoss_fp4_h200_trt.sh `moe_config.backend: TRITON`, gptoss_fp4_b200_trt.sh `MOE_BACKEND="TRTLLM"`). Other
expert formats (NVFP4, FP8 per tensor, BF16) are not known here.
"""

from servelab.specs.dtypes import Dtype

TRITON, TRTLLM, CUTLASS = "TRITON", "TRTLLM", "CUTLASS"

# The MoE backends the calibration's TensorRT-LLM rows ran: every row is an H200 (SM 90) run, gpt-oss with
# TRITON and DeepSeek with CUTLASS (InferenceX's H200 recipes, calibrate/data/inferencex_recipes.json
# `moe_backend`, and the AUTO rule above). The fitted MoE terms (per prompt token, per routed expert) are
# those kernels' costs beyond their roofline price.
FITTED_BACKENDS = frozenset({TRITON, CUTLASS})


def moe_backend(experts: Dtype, compute_capability: int) -> str | None:
    """The backend AUTO picks for experts of this format on a GPU of `compute_capability` (x 10), or None
    where the format's rule is not known here."""
    if experts == Dtype.mxfp4:
        if 90 <= compute_capability < 100:
            return TRITON
        return TRTLLM if 100 <= compute_capability < 120 else CUTLASS
    if experts == Dtype.fp8_block:
        return TRTLLM if compute_capability in (100, 103) else CUTLASS
    return None


def unfitted_backend(experts: Dtype, compute_capability: int) -> str | None:
    """The backend, where TensorRT-LLM runs MXFP4 experts on one the fitted MoE terms were not fitted on (so
    they are not carried there); None where the terms stand.

    Only MXFP4 experts: DeepSeek's FP8 block-scale experts also leave CUTLASS for TRTLLM on Blackwell, but
    there the fitted CPU term stands for the eager Python path of DeepSeek's steps, and its Blackwell points
    priced without it come out short (docs/accuracy.md, "TensorRT-LLM's gpt-oss points on B200"); the terms
    of GPU time stay on the fit's GPU for every model (servelab.predict.fit_reach; docs/accuracy.md, "MoE
    terms of GPU time stay on their GPU")."""
    backend = moe_backend(experts, compute_capability)
    if experts != Dtype.mxfp4 or backend is None or backend in FITTED_BACKENDS:
        return None
    return backend
