"""Sanity limits on a queried op key, so a typo (heads 7 over kv_heads 2, a 10^15-byte message) gets a clear
error instead of a confident number. The prediction hot path never calls this; user-facing entry points do."""

from servelab.errors import ServelabError
from servelab.perfdb.keys import (
    ZERO_OK,
    AttentionDecode,
    AttentionPrefill,
    DsaDecode,
    DsaPrefill,
    Dsv4Context,
    Dsv4Generation,
    GdnDecode,
    GdnPrefill,
    Gemm,
    MlaDecode,
    MlaPrefill,
    Moe,
    OpKey,
)
from servelab.specs.dtypes import parse_dtype

# generous upper bounds per field: beyond these no real deployment's rank-local shape lies
MAX = {
    "m": 1 << 24,
    "n": 1 << 20,
    "k": 1 << 20,
    "batch": 1 << 20,
    "seq": 1 << 24,
    "kv_len": 1 << 24,
    "heads": 1024,
    "kv_heads": 1024,
    "native_heads": 1024,
    "head_dim": 1024,
    "window": 1 << 24,
    "tokens": 1 << 24,
    "hidden": 1 << 18,
    "inter": 1 << 18,
    "experts": 4096,
    "topk": 64,
    "ep": 1024,
    "bytes": 1 << 40,
    "gpus": 1 << 16,
    "flops": 1 << 50,
    "kernels": 64,
    "index_topk": 1 << 24,
    "qk_dim": 1024,
    "v_dim": 1024,
    "new": 1 << 24,
    "past": 1 << 24,
    "k_heads": 1024,
    "v_heads": 1024,
    "k_dim": 1024,
    "conv_kernel": 64,
}


def check_key(key: OpKey) -> OpKey:
    """The key with dtype aliases normalised; ServelabError naming the field for anything out of range."""
    op = key.op
    for field, value in key._asdict().items():
        limit = MAX.get(field)
        floor = 0 if field in ZERO_OK else 1
        if limit is not None and not (floor <= value <= limit):
            raise ServelabError(f"{value} is outside the supported range {floor}..{limit}", field=field)
    if isinstance(key, Gemm | Moe):
        key = key._replace(dtype=parse_dtype(key.dtype, "dtype").value)
    if isinstance(key, AttentionPrefill | AttentionDecode | MlaDecode | DsaPrefill | DsaDecode):
        key = key._replace(kv_dtype=parse_dtype(key.kv_dtype, "kv_dtype").value)
    if isinstance(key, GdnPrefill | GdnDecode):
        key = key._replace(state_dtype=parse_dtype(key.state_dtype, "state_dtype").value)
        if key.v_heads % key.k_heads:
            raise ServelabError(f"{op}: v_heads={key.v_heads} must be a multiple of k_heads={key.k_heads}")
    if isinstance(key, AttentionPrefill | AttentionDecode) and key.heads % key.kv_heads:
        raise ServelabError(f"{op}: heads={key.heads} must be a multiple of kv_heads={key.kv_heads}")
    if (
        isinstance(key, MlaPrefill | MlaDecode | DsaPrefill | DsaDecode | Dsv4Context | Dsv4Generation)
        and key.native_heads % key.heads
    ):
        raise ServelabError(
            f"{op}: heads={key.heads} (rank-local) must divide native_heads={key.native_heads}; "
            "rank-local heads are native heads / tp"
        )
    if isinstance(key, Moe):
        _check_moe(key)
    return key


def _check_moe(key: Moe) -> None:
    if key.topk > key.experts:
        raise ServelabError(f"moe: topk={key.topk} exceeds experts={key.experts}")
    if key.experts % key.ep:
        raise ServelabError(f"moe: experts={key.experts} must be a multiple of ep={key.ep}")
    if key.distribution not in ("uniform", "power_law"):
        raise ServelabError(f"{key.distribution!r}; expected uniform or power_law", field="distribution")
