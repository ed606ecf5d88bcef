"""Op keys: the exact contract between the collector (which measures them) and the predictor (which asks).

Shapes are rank-local (heads per rank, N / tp, experts per rank), plus the native shape where two models could
otherwise collide (DeepSeek-V4 modules and MLA carry native_heads). Keys are NamedTuples: hashable and cheap
to build on the prediction hot path; the trailing `op` field keeps keys of different ops distinct.
"""

import math
from typing import NamedTuple

from servelab.errors import ServelabError
from servelab.perfdb.ops import COMM_OPS, DSV4_CONTEXT_OPS, DSV4_GENERATION_OPS, OpName
from servelab.registry import Registry


class Gemm(NamedTuple):
    """C[m, n] = A[m, k] @ W[k, n]^T, weights in `dtype` (bf16, fp8, fp8_block, fp4, mxfp4, nvfp4)."""

    m: int
    n: int
    k: int
    dtype: str = "bf16"
    op: OpName = OpName.gemm


class AttentionPrefill(NamedTuple):
    """Causal self-attention of `batch` sequences of `seq` new tokens each (no cached prefix)."""

    batch: int
    seq: int
    heads: int
    kv_heads: int
    head_dim: int
    window: int = 0  # 0 = full attention
    kv_dtype: str = "bf16"
    op: OpName = OpName.attention_prefill


class AttentionDecode(NamedTuple):
    """One query token per sequence against `kv_len` cached tokens."""

    batch: int
    kv_len: int
    heads: int
    kv_heads: int
    head_dim: int
    window: int = 0
    kv_dtype: str = "bf16"
    op: OpName = OpName.attention_decode


class MlaPrefill(NamedTuple):
    """MLA prefill as multi-head attention (q/k 192 = 128 nope + 64 rope, v 128), DeepSeek-V3 shapes."""

    batch: int
    seq: int
    heads: int
    native_heads: int
    op: OpName = OpName.mla_prefill


class MlaDecode(NamedTuple):
    """Absorbed MLA decode: queries of 576 (512 latent + 64 rope) against the shared latent cache."""

    batch: int
    kv_len: int
    heads: int
    native_heads: int
    kv_dtype: str = "bf16"
    op: OpName = OpName.mla_decode


class DsaPrefill(NamedTuple):
    """The attention core of DeepSeek's sparse attention (GLM-5, DeepSeek-V3.2) over a prefill of `seq` tokens
    from an empty cache, causal, each query attending to at most `index_topk` keys; `kv_len` is the longest
    sequence of the engine's batch, which picks dense or sparse kernels (roofline `_dsa_prefill`). Dense:
    multi-head attention of qk_dim / v_dim; sparse: absorbed over the kv_lora_rank 512 + rope 64 latent."""

    batch: int
    seq: int
    kv_len: int
    heads: int
    native_heads: int
    index_topk: int
    qk_dim: int
    v_dim: int
    kv_dtype: str = "bf16"
    op: OpName = OpName.dsa_prefill


class DsaDecode(NamedTuple):
    """DSA decode: one query per sequence, absorbed, against the `index_topk` keys its indexer picked out
    of `kv_len` cached tokens (all of them while kv_len <= index_topk)."""

    batch: int
    kv_len: int
    heads: int
    native_heads: int
    index_topk: int
    kv_dtype: str = "bf16"
    op: OpName = OpName.dsa_decode


class DsaIndexer(NamedTuple):
    """DSA's lightning indexer: `batch` sequences of `new` query tokens after `past` cached ones, each query
    scoring every key up to its own position with `heads` fp8 heads of `head_dim`, then a top-k per query."""

    batch: int
    new: int
    past: int
    heads: int
    head_dim: int
    op: OpName = OpName.dsa_indexer


class GdnPrefill(NamedTuple):
    """Gated DeltaNet linear attention over a prefill chunk of `seq` tokens of each of `batch` sequences, on
    one rank: the causal conv1d over the q, k and v channels, then the chunked gated delta rule (FLA's
    kernels, chunks of 64 tokens) from each sequence's recurrent state of v_heads x k_dim x v_dim, which it
    reads and writes back. Its cost grows with the chunk, not with the tokens before it."""

    batch: int
    seq: int
    k_heads: int
    v_heads: int
    k_dim: int
    v_dim: int
    conv_kernel: int
    state_dtype: str = "fp32"
    op: OpName = OpName.gdn_prefill


class GdnDecode(NamedTuple):
    """Gated DeltaNet decode on one rank: each of `batch` tokens updates its sequence's conv window and
    recurrent state (read and written once) and reads its output from the state."""

    batch: int
    k_heads: int
    v_heads: int
    k_dim: int
    v_dim: int
    conv_kernel: int
    state_dtype: str = "fp32"
    op: OpName = OpName.gdn_decode


class Dsv4Context(NamedTuple):
    """DeepSeek-V4 attention module in prefill (compressor + indexer top-k + sparse attention + window).
    op is dsv4_csa_context_module or dsv4_hca_context_module."""

    native_heads: int
    heads: int
    batch: int
    seq: int
    op: OpName = OpName.dsv4_csa_context_module


class Dsv4Generation(NamedTuple):
    """DeepSeek-V4 attention module in decode.
    op is dsv4_csa_generation_module or dsv4_hca_generation_module."""

    native_heads: int
    heads: int
    batch: int
    kv_len: int
    op: OpName = OpName.dsv4_csa_generation_module


class Moe(NamedTuple):
    """Expert compute only (no routing or communication) on one rank: `tokens` tokens of the EP group each
    pick `topk` of `experts`; this rank holds experts / ep of them, each `inter` wide (already split by
    moe_tp)."""

    tokens: int
    hidden: int
    inter: int
    experts: int
    topk: int
    ep: int
    dtype: str = "bf16"
    distribution: str = "uniform"  # or "power_law"
    op: OpName = OpName.moe


class Comm(NamedTuple):
    """A collective over `gpus` ranks; op is allreduce, allgather, reducescatter, alltoall or p2p.
    `bytes` is the per-rank buffer: allreduce input, allgather output, alltoall bytes sent, p2p message."""

    bytes: int
    gpus: int
    op: OpName = OpName.allreduce


class Memory(NamedTuple):
    """A bandwidth-bound elementwise op (norms, activations, rope, mHC mixing, embedding lookup)."""

    bytes: int
    flops: int = 0
    kernels: int = 1  # small kernels this op stands for (routing, permutation), each with a launch floor
    op: OpName = OpName.elementwise


OpKey = (
    Gemm
    | AttentionPrefill
    | AttentionDecode
    | MlaPrefill
    | MlaDecode
    | DsaPrefill
    | DsaDecode
    | DsaIndexer
    | GdnPrefill
    | GdnDecode
    | Dsv4Context
    | Dsv4Generation
    | Moe
    | Comm
    | Memory
)

KeyType = (
    type[Gemm]
    | type[AttentionPrefill]
    | type[AttentionDecode]
    | type[MlaPrefill]
    | type[MlaDecode]
    | type[DsaPrefill]
    | type[DsaDecode]
    | type[DsaIndexer]
    | type[GdnPrefill]
    | type[GdnDecode]
    | type[Dsv4Context]
    | type[Dsv4Generation]
    | type[Moe]
    | type[Comm]
    | type[Memory]
)

KEY_TYPES: Registry[KeyType] = Registry(
    "op",
    {
        OpName.gemm: Gemm,
        OpName.attention_prefill: AttentionPrefill,
        OpName.attention_decode: AttentionDecode,
        OpName.mla_prefill: MlaPrefill,
        OpName.mla_decode: MlaDecode,
        OpName.dsa_prefill: DsaPrefill,
        OpName.dsa_decode: DsaDecode,
        OpName.dsa_indexer: DsaIndexer,
        OpName.gdn_prefill: GdnPrefill,
        OpName.gdn_decode: GdnDecode,
        **{op: Dsv4Context for op in DSV4_CONTEXT_OPS},
        **{op: Dsv4Generation for op in DSV4_GENERATION_OPS},
        OpName.moe: Moe,
        **{op: Comm for op in COMM_OPS},
        OpName.elementwise: Memory,
    },
)

TEXT_FIELDS = ("dtype", "kv_dtype", "distribution", "state_dtype")  # the other key fields are integers
ZERO_OK = ("window", "flops", "past")  # integer fields where 0 is meaningful (full attention, a pure copy,
# an empty cache)

# DeepSeek-V4 index_topk by native head count (V4-Pro 128 heads: 1024; V4-Flash 64 heads: 512)
DSV4_TOPK = {128: 1024, 64: 512}


def key_from_dict(op: str, fields: dict) -> OpKey:
    """Build a key from user/JSON fields; a ServelabError names a missing, unknown or mistyped field.

    Shape fields take integers only: a float (even 4096.0), a bool, a string or a non-finite number is refused
    rather than truncated, so `m: 1.5` or `m: true` never answers as m=1."""
    cls = KEY_TYPES.get(op)
    names = [f for f in cls._fields if f != "op"]
    unknown = set(fields) - set(names) - {"op"}
    if unknown:
        raise ServelabError(
            f"{op}: unknown field(s) {', '.join(sorted(unknown))}; expected {', '.join(names)}"
        )
    values: dict[str, int | str] = {}
    for name in names:
        if name not in fields:
            if name in cls._field_defaults:
                continue
            raise ServelabError(f"missing ({op} takes {', '.join(names)})", field=name)
        value = fields[name]
        if name in TEXT_FIELDS:
            if not isinstance(value, str):
                raise ServelabError(f"expected a name (a string), got {_describe(value)}", field=name)
            values[name] = value
            continue
        floor = 0 if name in ZERO_OK else 1
        if isinstance(value, bool) or not isinstance(value, int):
            expected = "an integer >= 0" if floor == 0 else "a positive integer"
            raise ServelabError(f"expected {expected}, got {_describe(value)}", field=name)
        if value < floor:
            raise ServelabError(f"must be >= {floor}, got {value}", field=name)
        values[name] = value
    return cls(**values, op=OpName(op))  # type: ignore[arg-type]  # fields checked against cls above


def _describe(value) -> str:
    """A value as the JSON it came from, and what kind of wrong it is."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a bool)"
    if isinstance(value, float):
        return f"{value!r} (not finite)" if not math.isfinite(value) else f"{value!r} (a float)"
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"{value!r} (a string)"
    return f"a {type(value).__name__}"


def key_to_dict(key: OpKey) -> dict:
    return key._asdict()
