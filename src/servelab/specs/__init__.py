"""Specs: the model, the system and the parallel split, each defined once."""

from servelab.errors import ServelabError
from servelab.specs.attention import (
    AttentionKind,
    DsaAttention,
    Dsv4Attention,
    GdnAttention,
    GqaAttention,
    LayerAttention,
    MlaAttention,
    MlaFp8KvLayout,
)
from servelab.specs.dtypes import ENGINE_KV_CACHE_DTYPES, Dtype, Precision, parse_dtype
from servelab.specs.model import HyperConnections, ModelSpec, MoE, Mtp
from servelab.specs.parallel import Parallel
from servelab.specs.registry import list_checkpoints, list_models, load_model
from servelab.specs.system import SystemSpec, list_systems, load_system

FP8_CONVERSIONS = {
    "deepseek-v4-pro": "sgl-project/DeepSeek-V4-Pro-FP8",
    "deepseek-v4-flash": "sgl-project/DeepSeek-V4-Flash-FP8",
}


def check_precision(model: ModelSpec, system: SystemSpec) -> None:
    """Refuse a precision the system cannot run, pointing to the conversion that can."""
    # MXFP4 has a weight-only path on Hopper (dequantized to bf16 in the GEMM, as vLLM serves gpt-oss there);
    # DeepSeek-V4's native FP4 and NVFP4 need FP4 tensor cores.
    fp4_parts = [
        part
        for part in ("weights", "experts")
        if getattr(model.precision, part).is_fp4 and getattr(model.precision, part) != Dtype.mxfp4
    ]
    if fp4_parts and not system.supports_fp4:
        conversion = FP8_CONVERSIONS.get(model.name)
        hint = (
            f"use the FP8 conversion {conversion}"
            if conversion
            else "use an FP8 or BF16 checkpoint (--weight-dtype fp8)"
        )
        fmt = getattr(model.precision, fp4_parts[-1]).value
        raise ServelabError(
            f"{model.name}: {' and '.join(fp4_parts)} in {fmt} need FP4 tensor cores, which {system.name} "
            f"({system.architecture}) lacks; {hint}"
        )


__all__ = [
    "AttentionKind",
    "DsaAttention",
    "Dsv4Attention",
    "GdnAttention",
    "Dtype",
    "ENGINE_KV_CACHE_DTYPES",
    "GqaAttention",
    "HyperConnections",
    "LayerAttention",
    "MlaAttention",
    "MlaFp8KvLayout",
    "ModelSpec",
    "MoE",
    "Mtp",
    "Parallel",
    "Precision",
    "ServelabError",
    "SystemSpec",
    "check_precision",
    "list_checkpoints",
    "list_models",
    "list_systems",
    "load_model",
    "load_system",
    "parse_dtype",
]
