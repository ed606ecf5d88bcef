"""Number formats of weights, KV cache and compute, their storage cost in bytes per element, and the formats
one model stores its parts in."""

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from servelab.errors import ServelabError


class Dtype(StrEnum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"  # e4m3 with per-tensor (or per-row) scales
    fp8_block = "fp8_block"  # e4m3 with 128x128 block scales (DeepSeek checkpoints)
    fp4 = "fp4"  # DeepSeek-V4 native FP4 experts (e2m1, one e8m0 scale per 32 values)
    mxfp4 = "mxfp4"  # OCP microscaling FP4 (one e8m0 scale per 32 values), gpt-oss experts
    nvfp4 = "nvfp4"  # NVIDIA FP4 (one fp8 scale per 16 values)
    # INT4 weight-only (W4A16): symmetric int4 with one bf16 scale per 32 values, Kimi-K2's routed experts
    # (compressed-tensors pack-quantized). The engines widen the weights to bf16 inside the GEMM and multiply
    # bf16 activations at the bf16 tensor-core rate: vLLM 0.32.0 runs them through its WNA16 MoE kernels
    # (fused_moe/oracle/int_wna16.py: FlashInfer's TensorRT-LLM MXINT4 kernel, Marlin, Triton WNA16; "always
    # BF16 activation for WNA16 MoE")
    int4 = "int4"
    fp32 = "fp32"  # IEEE single precision: a GEMM in it runs on the CUDA cores (no tensor cores)

    @property
    def bytes(self) -> float:
        """Storage bytes per element, scales included."""
        return _BYTES[self]

    @property
    def compute(self) -> str:
        """The rate a GEMM with these weights runs at: the tensor cores' 'bf16', 'fp8' or 'fp4', or 'fp32'
        (the CUDA cores' single-precision rate)."""
        if self == Dtype.fp32:
            return "fp32"
        if self in (Dtype.bf16, Dtype.fp16, Dtype.int4):  # int4: weight-only, bf16 activations
            return "bf16"
        if self in (Dtype.fp8, Dtype.fp8_block):
            return "fp8"
        return "fp4"

    @property
    def is_fp4(self) -> bool:
        return self.compute == "fp4"


_BYTES = {
    Dtype.bf16: 2.0,
    Dtype.fp16: 2.0,
    Dtype.fp8: 1.0,
    Dtype.fp8_block: 1.0 + 4 / (128 * 128),
    Dtype.fp4: 0.5 + 1 / 32,
    Dtype.mxfp4: 0.5 + 1 / 32,
    Dtype.nvfp4: 0.5 + 1 / 16,
    Dtype.int4: 0.5 + 2 / 32,
    Dtype.fp32: 4.0,
}


# KV-cache dtypes as the engines' --kv-cache-dtype flags (and TensorRT-LLM's kv_cache_config.dtype) write
# them. "auto" keeps the model spec's own (None), which is what every engine runs by default: the format the
# checkpoint's quantization config declares (ModelOpt's kv_cache_quant_algo, FP8 in NVIDIA's FP8 and NVFP4
# releases; the spec records it, hf_config and registry.Checkpoint), else the model dtype. Read in vLLM
# 0.25.0 (utils/torch_utils.py resolve_kv_cache_dtype_string; vLLM 0.12 had none: `auto` was the model
# dtype) and SGLang 0.5.23 (srt/mem_cache/kv_cache_dtype.py configure_kv_cache_dtype); TensorRT-LLM's
# KvCacheConfig.dtype `auto` does the same (recalled, its source was not read).
ENGINE_KV_CACHE_DTYPES: dict[str, Dtype | None] = {
    "fp8": Dtype.fp8,
    "fp8_e4m3": Dtype.fp8,
    "fp8_e5m2": Dtype.fp8,
    "fp8_inc": Dtype.fp8,
    "fp8_ds_mla": Dtype.fp8,
    "bf16": Dtype.bf16,
    "bfloat16": Dtype.bf16,
    "fp16": Dtype.fp16,
    "float16": Dtype.fp16,
    "half": Dtype.fp16,
    "auto": None,
}


class Precision(BaseModel):
    """Storage formats per part of the model. GEMMs run at the rate of the weights' format, but for those the
    checkpoint keeps out of its quantization (`unquantized`), which are stored and run in BF16."""

    model_config = ConfigDict(frozen=True)
    weights: Dtype = Dtype.bf16
    experts: Dtype = Dtype.bf16
    kv_cache: Dtype = Dtype.bf16
    indexer_cache: Dtype | None = None  # DeepSeek-V4 only
    # the step graph's ops whose weights the checkpoint leaves unquantized (its quantization config's module
    # exclusions, specs.quant_exclusions): NVIDIA's NVFP4 DeepSeek releases keep the MLA projections in BF16
    unquantized: tuple[str, ...] = ()

    @model_serializer(mode="wrap")
    def _without_empty_unquantized(self, handler: SerializerFunctionWrapHandler) -> dict:
        """No `unquantized` where the checkpoint excludes nothing: the dumps of every other model (a twin
        report's, `servelab models`') stay as they were."""
        data = handler(self)
        if not self.unquantized:
            data.pop("unquantized", None)
        return data

    def gemm_dtype(self, op: str) -> str:
        """The format the weights of a dense GEMM op of the step graph run in."""
        return Dtype.bf16.value if op in self.unquantized else self.weights.value


def parse_dtype(value: str, field: str) -> Dtype:
    """A Dtype from user text, or a one-line error naming the field and the accepted values."""
    aliases = {"bfloat16": "bf16", "float16": "fp16", "e4m3": "fp8", "fp8_e4m3": "fp8", "auto": "bf16"}
    text = aliases.get(value.strip().lower(), value.strip().lower())
    try:
        return Dtype(text)
    except ValueError:
        raise ServelabError(
            f"unknown dtype {value!r}; expected one of {', '.join(d.value for d in Dtype)}", field=field
        ) from None
