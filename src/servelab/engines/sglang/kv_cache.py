"""SGLang's KV-cache format where the launch names none (`--kv-cache-dtype auto`)."""

from servelab.specs.attention import AttentionKind
from servelab.specs.dtypes import Dtype
from servelab.specs.model import ModelSpec

# DeepSeek's sparse attention runs its cache in FP8 from this compute capability on (Blackwell)
DSA_FP8_FROM_SM = 100


def default_kv_dtype(model: ModelSpec, compute_capability: int) -> Dtype | None:
    """The format `auto` resolves to where SGLang picks one itself, None where it keeps the checkpoint's: a
    model with DeepSeek's sparse attention (GLM-5, DeepSeek-V3.2) gets fp8_e4m3 on SM 10.0 and later and
    bfloat16 before (SGLang 0.5.10, server_args.py _set_default_nsa_kv_cache_dtype)."""
    if model.attention.kind == AttentionKind.dsa and compute_capability >= DSA_FP8_FROM_SM:
        return Dtype.fp8
    return None
