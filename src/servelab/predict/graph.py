"""The op graph of one engine step: which op keys a step of a model runs, and how many times.

A step serves a batch shape (prefill chunks plus decoding sequences) on one replica; ops are rank-local,
and the step time is the time of one (balanced) rank. Layers of the same kind are grouped and counted, so the
graph has tens of ops whatever the depth.
"""

from collections.abc import Callable
from enum import StrEnum
from math import ceil
from typing import NamedTuple

from servelab.perfdb.keys import (
    AttentionDecode,
    AttentionPrefill,
    Comm,
    DsaDecode,
    DsaIndexer,
    DsaPrefill,
    Dsv4Context,
    Dsv4Generation,
    GdnDecode,
    GdnPrefill,
    Gemm,
    Memory,
    MlaDecode,
    MlaPrefill,
    Moe,
    OpKey,
)
from servelab.perfdb.ops import DSV4_CONTEXT_OPS, DSV4_GENERATION_OPS, OpName
from servelab.perfdb.roofline import dsv4_kernel_heads
from servelab.specs import (
    AttentionKind,
    DsaAttention,
    Dsv4Attention,
    GdnAttention,
    GqaAttention,
    HyperConnections,
    LayerAttention,
    MlaAttention,
    ModelSpec,
    MoE,
    Parallel,
)

DSV4_WINDOW = 128


class StepShape(NamedTuple):
    """One engine step on one replica: prefill chunks (new_tokens, past_tokens) and decoding sequences."""

    prefill: tuple[tuple[int, int], ...] = ()
    decode_batch: int = 0
    decode_kv_len: int = 0
    spec_tokens: int = 0  # draft tokens each decoding sequence verifies (MTP / draft model)
    # attention-DP ranks with work (0: all). Ranks step in lockstep through the MoE layers, whose tokens are
    # those of the ranks with work: fewer requests than ranks leave the experts less to do.
    ranks: int = 0


TOKENS, PREFILL_ATTN, DECODE_ATTN, HEAD = "tokens", "prefill_attention", "decode_attention", "head"
ALL_PARTS = frozenset((TOKENS, PREFILL_ATTN, DECODE_ATTN, HEAD))


class Op(NamedTuple):
    name: str  # the role in the model: qkv_proj, attention, moe_experts, tp_allreduce, ...
    key: OpKey
    # times per step on one rank's path (layers); negative for the causal-prefix subtraction. The name shadows
    # tuple.count, which no caller uses.
    count: float  # type: ignore[assignment]


class OpCategory(StrEnum):
    """Where a step op's time goes, for explaining a step: every op name the graph emits has one."""

    attention = "attention"
    communication = "communication"
    moe = "moe"
    gemm = "gemm"
    memory = "memory-bound (norms, activations, embedding)"


def _categories(category: OpCategory, names: str) -> dict[str, OpCategory]:
    return dict.fromkeys(names.split(), category)


OP_CATEGORY: dict[str, OpCategory] = {
    **_categories(
        OpCategory.attention,
        "attention_prefill attention_decode mla_prefill mla_decode mla_q_absorb mla_v_absorb swa_prefill"
        " swa_decode compressor_proj indexer_q_proj indexer_k_proj dsa_prefill dsa_decode dsa_indexer"
        " gdn_prefill gdn_decode"
        f" {' '.join(DSV4_CONTEXT_OPS + DSV4_GENERATION_OPS)}",
    ),
    **_categories(
        OpCategory.communication,
        "attn_allreduce ffn_allreduce logits_allgather ep_dispatch ep_combine pp_send_recv",
    ),
    **_categories(
        OpCategory.moe, "router moe_route moe_permute moe_experts moe_combine shared_gate_up shared_down"
    ),
    **_categories(
        OpCategory.gemm,
        "qkv_proj qkv_a_proj q_a_kv_proj q_b_proj kv_b_proj o_proj o_a_proj o_b_proj ffn_gate_up ffn_down"
        " lm_head mtp_proj mhc_weights gdn_in_proj gdn_ba_proj gdn_out_proj",
    ),
    **_categories(
        OpCategory.memory,
        "embedding attn_norm ffn_norm final_norm ffn_act qk_norm_rope mhc_mix attn_gate gdn_norm_gate",
    ),
}


MTP_PREFIX = "mtp."  # the MTP module's ops: the same roles, run once more per step


def op_category(name: str) -> OpCategory:
    return OP_CATEGORY[name.removeprefix(MTP_PREFIX)]


class _Tokens(NamedTuple):
    total: int  # tokens per attention rank this step
    prefill: tuple[tuple[int, int, int], ...]  # (count, new, past) per attention rank
    decode: int  # decoding sequences per attention rank
    decode_tokens: int  # their tokens (1 + spec each)
    kv_len: int
    sampled: int  # sequences sampling a token this step, per attention rank
    group_tokens: int  # tokens entering MoE across the EP group


def per_rank(shape: StepShape, parallel: Parallel) -> _Tokens:
    """The tokens one attention rank works on in this step (sequences spread evenly over attn_dp ranks)."""
    dp = parallel.attn_dp
    chunks = shape.prefill
    prefill: tuple[tuple[int, int, int], ...]
    if len(chunks) < 2:  # most steps: no chunk, or one (a chunk alone is one per rank: ceil(1 / dp) = 1)
        prefill = ((1, *chunks[0]),) if chunks else ()
    elif chunks.count(chunks[0]) == len(chunks):  # one chunk on each attention-DP rank: one group
        prefill = ((ceil(len(chunks) / dp), *chunks[0]),)
    else:
        groups: dict[tuple[int, int], int] = {}
        for chunk in chunks:
            groups[chunk] = groups.get(chunk, 0) + 1
        prefill = tuple((ceil(c / dp), n, p) for (n, p), c in sorted(groups.items()))
    decode = ceil(shape.decode_batch / dp) if shape.decode_batch else 0
    decode_tokens = decode * (1 + shape.spec_tokens)
    total = sum(c * n for c, n, _ in prefill) + decode_tokens
    group = total * min(shape.ranks or dp, dp) if parallel.dp_attn else total
    return _Tokens(
        total,
        prefill,
        decode,
        decode_tokens,
        shape.decode_kv_len,
        sum(c for c, _, _ in prefill) + decode,
        group,
    )


def step_ops(
    model: ModelSpec, parallel: Parallel, shape: StepShape, parts: frozenset = ALL_PARTS
) -> list[Op]:
    """All ops of one step, rank-local; or only some parts of it: the attention cores of prefill chunks, of
    decoding sequences, the LM head (which depends on the sequences that sample), and everything else (which
    depends only on token counts). Empty for an empty step."""
    t = per_rank(shape, parallel)
    if t.total == 0:
        return []
    ops: list[Op] = []
    h = model.hidden_size
    for (kind, is_moe, hashed), count in model.layer_groups:
        moe = model.moe if is_moe else None
        ops.extend(_layer_ops(model, parallel, t, kind, moe, hashed, count, parts))
    if HEAD in parts:
        ops.append(Op("lm_head", Gemm(max(t.sampled, 1), model.vocab_size // parallel.attn_tp, h, "bf16"), 1))
        if parallel.attn_tp > 1:
            logits = max(t.sampled, 1) * model.vocab_size * 2
            ops.append(Op("logits_allgather", Comm(logits, parallel.attn_tp, OpName.allgather), 1))
    if TOKENS not in parts:
        return ops
    ops.append(Op("embedding", Memory(t.total * h * 4), 1))
    if shape.spec_tokens and model.mtp:
        draft = _Tokens(
            t.decode,
            (),
            t.decode,
            t.decode,
            t.kv_len,
            t.decode,
            t.decode * parallel.attn_dp if parallel.dp_attn else t.decode,
        )
        last = model.layer_attention[-1]
        mtp = _layer_ops(model, parallel, draft, last, model.moe, False, shape.spec_tokens, ALL_PARTS)
        mtp.append(Op("mtp_proj", Gemm(t.decode, h, 2 * h, model.precision.weights.value), shape.spec_tokens))
        mtp.append(
            Op("lm_head", Gemm(t.decode, model.vocab_size // parallel.attn_tp, h, "bf16"), shape.spec_tokens)
        )
        ops.extend(Op(MTP_PREFIX + op.name, op.key, op.count) for op in mtp)
    ops.append(Op("final_norm", Memory(t.total * h * 4), 1))
    if parallel.pp > 1:
        ops.append(Op("pp_send_recv", Comm(t.total * h * 2, 2, OpName.p2p), parallel.pp - 1))
    return ops


def _layer_ops(
    model: ModelSpec,
    parallel: Parallel,
    t: _Tokens,
    kind: LayerAttention,
    moe: MoE | None,  # None for a dense FFN
    hashed: bool,
    count: float,
    parts: frozenset,
) -> list[Op]:
    h, wdt = model.hidden_size, model.precision.weights.value
    T = t.total
    att = model.attention
    projections, prefill_attention, decode_attention = _FAMILIES[att.kind]
    ops: list[Op] = []
    if PREFILL_ATTN in parts and t.prefill:
        ops.extend(prefill_attention(att, model, parallel, t, kind))
    if DECODE_ATTN in parts and t.decode:
        ops.extend(decode_attention(att, model, parallel, t, kind))
    if TOKENS in parts:
        if model.hyper_connections:
            ops.extend(_mhc_ops(model.hyper_connections, h, T))
        ops.append(Op("attn_norm", Memory(T * h * 4), 1))
        ops.extend(projections(att, model, parallel, t, kind))
        if parallel.attn_tp > 1:
            ops.append(Op("attn_allreduce", Comm(T * h * 2, parallel.attn_tp, OpName.allreduce), 1))
        ops.append(Op("ffn_norm", Memory(T * h * 4), 1))
        if moe is not None:
            ops.extend(_moe_ops(model, moe, parallel, t, hashed))
        else:
            inter = (model.intermediate_size or 0) // parallel.attn_tp
            ops.append(Op("ffn_gate_up", Gemm(T, 2 * inter, h, wdt), 1))
            ops.append(Op("ffn_act", Memory(T * inter * 6), 1))
            ops.append(Op("ffn_down", Gemm(T, h, inter, wdt), 1))
        if parallel.attn_tp > 1 and not (moe is not None and parallel.dp_attn):
            ops.append(Op("ffn_allreduce", Comm(T * h * 2, parallel.tp, OpName.allreduce), 1))
    if count == 1 and type(count) is int:  # op.count * 1 is op.count, of its own type
        return ops
    # the Ops made by tuple's own constructor, as Op(...) makes them without its Python-level __new__ (a
    # cold plan scales hundreds of thousands)
    return [_new_tuple(Op, (name, key, c * count)) for name, key, c in ops]


_new_tuple = tuple.__new__


def _prefill_attention(name: str, t: _Tokens, make: Callable[[int, int], OpKey]) -> list[Op]:
    """Causal attention of a chunk after `past` cached tokens: F(past + new) - F(past), F the full prefill."""
    ops = []
    for c, new, past in t.prefill:
        ops.append(Op(name, make(c, past + new), 1))
        if past:
            ops.append(Op(name, make(c, past), -1))
    return ops


# ---- GQA (with sliding-window layers) ---------------------------------------------------------------------
def _gqa_projections(
    att: GqaAttention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    h, hd, prec = model.hidden_size, att.head_dim, model.precision
    heads, kvh = parallel.heads_local(model), parallel.kv_heads_local(model)
    return [
        Op("qkv_proj", Gemm(t.total, (heads + 2 * kvh) * hd, h, prec.gemm_dtype("qkv_proj")), 1),
        Op("qk_norm_rope", Memory(t.total * (heads + kvh) * hd * 4), 1),
        Op("o_proj", Gemm(t.total, h, heads * hd, prec.gemm_dtype("o_proj")), 1),
    ]


def _gqa_prefill(
    att: GqaAttention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    hd, heads, kvh = att.head_dim, parallel.heads_local(model), parallel.kv_heads_local(model)
    kvdt = model.precision.kv_cache.value
    if kind == LayerAttention.sliding:
        w = att.sliding_window or 0
        return [
            Op("attention_prefill", AttentionPrefill(c, new, heads, kvh, hd, w, kvdt), 1)
            for c, new, _ in t.prefill
        ]
    return _prefill_attention(
        "attention_prefill", t, lambda c, s: AttentionPrefill(c, s, heads, kvh, hd, 0, kvdt)
    )


def _gqa_decode(
    att: GqaAttention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    window = (att.sliding_window or 0) if kind == LayerAttention.sliding else 0
    kv = min(t.kv_len, window) if window else t.kv_len
    key = AttentionDecode(
        t.decode_tokens,
        kv,
        parallel.heads_local(model),
        parallel.kv_heads_local(model),
        att.head_dim,
        window,
        model.precision.kv_cache.value,
    )
    return [Op("attention_decode", key, 1)]


# ---- MLA (DeepSeek-V3 / R1): prefill as multi-head attention, decode absorbed -----------------------------
def _mla_projections(
    att: MlaAttention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    h, dtype = model.hidden_size, model.precision.gemm_dtype
    heads = parallel.heads_local(model)
    nope, rope, v, lora = att.qk_nope_head_dim, att.qk_rope_head_dim, att.v_head_dim, att.kv_lora_rank
    ops = [
        Op("qkv_a_proj", Gemm(t.total, att.q_lora_rank + lora + rope, h, dtype("qkv_a_proj")), 1),
        Op("q_b_proj", Gemm(t.total, heads * (nope + rope), att.q_lora_rank, dtype("q_b_proj")), 1),
        Op("o_proj", Gemm(t.total, h, heads * v, dtype("o_proj")), 1),
    ]
    prefill_tokens = t.total - t.decode_tokens
    if prefill_tokens:
        ops.append(Op("kv_b_proj", Gemm(prefill_tokens, heads * (nope + v), lora, dtype("kv_b_proj")), 1))
    if t.decode:
        # per-head batched matmuls with the absorbed up-projections: as one GEMM of the same flops and bytes
        ops.append(Op("mla_q_absorb", Gemm(t.decode_tokens, heads * lora, nope, "bf16"), 1))
        ops.append(Op("mla_v_absorb", Gemm(t.decode_tokens, heads * v, lora, "bf16"), 1))
    return ops


def _mla_prefill(
    att: MlaAttention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    heads, native = parallel.heads_local(model), att.num_heads
    return _prefill_attention("mla_prefill", t, lambda c, s: MlaPrefill(c, s, heads, native))


def _mla_decode(
    att: MlaAttention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    key = MlaDecode(
        t.decode_tokens,
        t.kv_len,
        parallel.heads_local(model),
        att.num_heads,
        model.precision.kv_cache.value,
    )
    return [Op("mla_decode", key, 1)]


# ---- DSA (GLM-5, DeepSeek-V3.2): MLA whose queries attend to the index_topk keys an indexer picks ------
def _dsa_projections(
    att: DsaAttention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    """MLA's projections (a sparse prefill runs the absorbed up-projections instead of kv_b_proj: the same
    flops), and the indexer's, which TP replicates (SGLang 0.5.10 nsa_indexer.py: ReplicatedLinear): its
    query up-projection from the q latent, and its key and per-head weight projections from the hidden."""
    dtype = model.precision.gemm_dtype
    heads, dim = att.index_heads, att.index_head_dim
    return [
        *_mla_projections(att, model, parallel, t, kind),
        Op("indexer_q_proj", Gemm(t.total, heads * dim, att.q_lora_rank, dtype("indexer_q_proj")), 1),
        Op("indexer_k_proj", Gemm(t.total, dim + heads, model.hidden_size, dtype("indexer_k_proj")), 1),
    ]


def _dsa_prefill(
    att: DsaAttention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    """The attention core as the causal-prefix difference, and the indexer's scores where a chunk reaches past
    index_topk: shorter ones only store their indexer keys (SGLang 0.5.10 nsa_indexer.py forward_cuda skips
    the logits when the batch's longest sequence is within index_topk)."""
    heads, kvdt = parallel.heads_local(model), model.precision.kv_cache.value
    dims = (att.index_topk, att.q_head_dim, att.v_head_dim, kvdt)
    longest = max(new + past for _, new, past in t.prefill)
    ops = _prefill_attention(
        "dsa_prefill", t, lambda c, s: DsaPrefill(c, s, longest, heads, att.num_heads, *dims)
    )
    if longest > att.index_topk:
        ops.extend(
            Op("dsa_indexer", DsaIndexer(c, new, past, att.index_heads, att.index_head_dim), 1)
            for c, new, past in t.prefill
        )
    return ops


def _dsa_decode(
    att: DsaAttention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    """Every decode step scores the whole cache (CUDA graphs run the indexer's logits unconditionally)."""
    heads, kvdt = parallel.heads_local(model), model.precision.kv_cache.value
    past = max(t.kv_len - 1, 0)
    return [
        Op("dsa_decode", DsaDecode(t.decode_tokens, t.kv_len, heads, att.num_heads, att.index_topk, kvdt), 1),
        Op("dsa_indexer", DsaIndexer(t.decode_tokens, 1, past, att.index_heads, att.index_head_dim), 1),
    ]


# ---- DeepSeek-V4: low-rank q, one shared K=V head, CSA / HCA modules or sliding window, grouped output ----
def _dsv4_projections(
    att: Dsv4Attention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    h, hd, wdt = model.hidden_size, att.head_dim, model.precision.weights.value
    heads, T = parallel.heads_local(model), t.total
    ops = [
        Op("q_a_kv_proj", Gemm(T, att.q_lora_rank + hd, h, wdt), 1),
        Op("q_b_proj", Gemm(T, heads * hd, att.q_lora_rank, wdt), 1),
    ]
    if kind != LayerAttention.sliding:
        ops.append(Op("compressor_proj", Gemm(T, 2 * hd, h, wdt), 1))
    if kind == LayerAttention.csa:
        ops.append(
            Op("indexer_q_proj", Gemm(T, att.index_heads * att.index_head_dim, att.q_lora_rank, wdt), 1)
        )
        ops.append(Op("indexer_k_proj", Gemm(T, 3 * att.index_head_dim + att.index_heads, h, wdt), 1))
    groups = max(1, att.o_groups // parallel.attn_tp)
    ops.append(Op("o_a_proj", Gemm(T, att.o_lora_rank, heads * hd // groups, wdt), groups))
    ops.append(Op("o_b_proj", Gemm(T, h, groups * att.o_lora_rank, wdt), 1))
    return ops


def _dsv4_prefill(
    att: Dsv4Attention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    heads, native = parallel.heads_local(model), att.num_heads
    if kind == LayerAttention.sliding:
        # a generic attention key, which cannot say which kernel runs it: it carries the heads the engines'
        # DeepSeek-V4 kernel computes (the module keys below are padded where they are priced)
        kvdt, padded = model.precision.kv_cache.value, dsv4_kernel_heads(heads)
        return [
            Op("swa_prefill", AttentionPrefill(c, new, padded, 1, att.head_dim, DSV4_WINDOW, kvdt), 1)
            for c, new, _ in t.prefill
        ]
    ctx = OpName.dsv4_csa_context_module if kind == LayerAttention.csa else OpName.dsv4_hca_context_module
    return _prefill_attention(ctx, t, lambda c, s: Dsv4Context(native, heads, c, s, ctx))


def _dsv4_decode(
    att: Dsv4Attention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    heads, native = parallel.heads_local(model), att.num_heads
    if kind == LayerAttention.sliding:
        key = AttentionDecode(
            t.decode_tokens,
            min(t.kv_len, DSV4_WINDOW),
            dsv4_kernel_heads(heads),
            1,
            att.head_dim,
            DSV4_WINDOW,
            model.precision.kv_cache.value,
        )
        return [Op("swa_decode", key, 1)]
    gen = (
        OpName.dsv4_csa_generation_module if kind == LayerAttention.csa else OpName.dsv4_hca_generation_module
    )
    return [Op(gen, Dsv4Generation(native, heads, t.decode_tokens, t.kv_len, gen), 1)]


# ---- Gated DeltaNet hybrid (Qwen3.5, Qwen3-Next): linear-attention layers and gated GQA layers ----------
def _gdn_projections(
    att: GdnAttention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    """A full layer: GQA's projections with the output gate (the query projection twice as wide, the
    attention's output times the gate's sigmoid). A linear layer, split by heads over TP (SGLang 0.5.10
    models/qwen3_5.py Qwen3_5GatedDeltaNet): in_proj_qkvz (queries, keys, values and the norm's gate z),
    in_proj_ba (one decay and one step size per value head), the gated RMSNorm, out_proj."""
    h, T, dtype = model.hidden_size, t.total, model.precision.gemm_dtype
    tp = parallel.attn_tp
    if kind != LayerAttention.linear:
        heads, kvh, hd = parallel.heads_local(model), parallel.kv_heads_local(model), att.head_dim
        q = heads * hd * (2 if att.output_gate else 1)
        ops = [
            Op("qkv_proj", Gemm(T, q + 2 * kvh * hd, h, dtype("qkv_proj")), 1),
            Op("qk_norm_rope", Memory(T * (heads + kvh) * hd * 4), 1),
        ]
        if att.output_gate:
            ops.append(Op("attn_gate", Memory(T * heads * hd * 2 * 3), 1))
        ops.append(Op("o_proj", Gemm(T, h, heads * hd, dtype("o_proj")), 1))
        return ops
    values = att.linear_value_heads * att.linear_value_dim // tp
    return [
        Op("gdn_in_proj", Gemm(T, att.conv_channels // tp + values, h, dtype("gdn_in_proj")), 1),
        Op("gdn_ba_proj", Gemm(T, 2 * att.linear_value_heads // tp, h, dtype("gdn_ba_proj")), 1),
        Op("gdn_norm_gate", Memory(T * values * 2 * 3), 1),
        Op("gdn_out_proj", Gemm(T, h, values, dtype("gdn_out_proj")), 1),
    ]


def _gdn_shape(att: GdnAttention, parallel: Parallel) -> tuple[int, int, int, int, int]:
    """A rank's linear-attention heads and dims: key heads, value heads, key dim, value dim, conv kernel."""
    tp = parallel.attn_tp
    k_heads, v_heads = att.linear_key_heads // tp, att.linear_value_heads // tp
    return k_heads, v_heads, att.linear_key_dim, att.linear_value_dim, att.conv_kernel


def _gdn_prefill(
    att: GdnAttention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    """A linear layer's chunk costs what its own tokens cost (the state carries the past), a full layer's
    is GQA's causal prefix difference."""
    if kind != LayerAttention.linear:
        return _gqa_prefill(att, model, parallel, t, kind)
    shape, state = _gdn_shape(att, parallel), att.state_dtype.value
    return [Op("gdn_prefill", GdnPrefill(c, new, *shape, state), 1) for c, new, _ in t.prefill]


def _gdn_decode(
    att: GdnAttention, model: ModelSpec, parallel: Parallel, t: _Tokens, kind: LayerAttention
) -> list[Op]:
    if kind != LayerAttention.linear:
        return _gqa_decode(att, model, parallel, t, kind)
    key = GdnDecode(t.decode_tokens, *_gdn_shape(att, parallel), att.state_dtype.value)
    return [Op("gdn_decode", key, 1)]


# Per attention kind: the ops of its projections, of its prefill attention and of its decode attention
_Family = tuple[Callable[..., list[Op]], Callable[..., list[Op]], Callable[..., list[Op]]]
_FAMILIES: dict[AttentionKind, _Family] = {
    AttentionKind.gqa: (_gqa_projections, _gqa_prefill, _gqa_decode),
    AttentionKind.mla: (_mla_projections, _mla_prefill, _mla_decode),
    AttentionKind.dsa: (_dsa_projections, _dsa_prefill, _dsa_decode),
    AttentionKind.dsv4: (_dsv4_projections, _dsv4_prefill, _dsv4_decode),
    AttentionKind.gdn: (_gdn_projections, _gdn_prefill, _gdn_decode),
}


def _mhc_ops(hc: HyperConnections, h: int, T: int) -> list[Op]:
    """Manifold-constrained hyper-connections around both blocks of a layer: mixing weights from the hc.mult
    residual streams (a thin GEMM), a Sinkhorn projection of tiny matrices, the stream reads and writes."""
    m = hc.mult
    return [
        Op("mhc_weights", Gemm(T, 2 * m + m * m, m * h, "bf16"), 2),
        Op("mhc_mix", Memory(T * h * 2 * (3 * m + 2), T * m * m * hc.sinkhorn_iters * 4), 2),
    ]


def _moe_ops(model: ModelSpec, moe: MoE, parallel: Parallel, t: _Tokens, hashed: bool) -> list[Op]:
    h, T = model.hidden_size, t.total
    edt = model.precision.experts.value
    ops: list[Op] = []
    topk = moe.experts_per_token
    if not hashed:
        # bf16, or float32 where the engine keeps the gate so (EngineProfile.model_as_served)
        ops.append(Op("router", Gemm(T, moe.num_experts, h, moe.router_dtype.value), 1))
    # top-k softmax and block alignment, then the gather of tokens into expert order and the weighted combine
    ops.append(Op("moe_route", Memory(T * moe.num_experts * 4 + T * topk * 16, kernels=2), 1))
    ops.append(Op("moe_permute", Memory(T * topk * h * 4, kernels=1), 1))
    ops.append(Op("moe_combine", Memory(T * topk * h * 2 + T * h * 2, kernels=1), 1))
    if parallel.dp_attn and parallel.ep > 1:
        act = 1 if model.precision.experts.compute == "fp8" else 2
        ops.append(Op("ep_dispatch", Comm(T * topk * h * act, parallel.ep, OpName.alltoall), 1))
    inter = moe.intermediate_size // parallel.moe_tp
    ops.append(Op("moe_experts", Moe(t.group_tokens, h, inter, moe.num_experts, topk, parallel.ep, edt), 1))
    if parallel.dp_attn and parallel.ep > 1:
        ops.append(Op("ep_combine", Comm(T * topk * h * 2, parallel.ep, OpName.alltoall), 1))
    if moe.num_shared_experts:
        shared = moe.num_shared_experts * moe.intermediate_size // parallel.attn_tp
        wdt = model.precision.weights.value
        ops.append(Op("shared_gate_up", Gemm(T, 2 * shared, h, wdt), 1))
        ops.append(Op("shared_down", Gemm(T, h, shared, wdt), 1))
    return ops
