"""ModelSpec: the architecture of one checkpoint, parsed once from a Hugging Face config.json.

It answers parameter counts, weight bytes and KV-cache bytes; the step model reads its shapes.
"""

from enum import Enum
from functools import cached_property

from pydantic import BaseModel, ConfigDict

from servelab.specs.dtypes import Dtype

# DeepSeek-V4 cache entry sizes (models.md): fp8 non-rope + bf16 rope + scales + pad
DSV4_MAIN_ENTRY_FP8 = 448 + 64 * 2 + 7 + 1
DSV4_INDEXER_ENTRY = {Dtype.fp8: 132, Dtype.fp8_block: 132, Dtype.fp4: 68, Dtype.mxfp4: 68, Dtype.nvfp4: 68}
# Per-sequence FP32 compressor state kept by the engines (models.md estimate)
DSV4_STATE_CSA = 32 * 1024 + 8 * 1024
DSV4_STATE_HCA = 512 * 1024
MLA_FP8_SCALE_BYTES = 16  # 512 fp8 latent values carry 4 fp32 block scales


class AttentionKind(str, Enum):
    gqa = "gqa"
    mla = "mla"
    dsv4 = "dsv4"


class LayerAttention(str, Enum):
    full = "full"  # GQA / MLA over the whole context
    sliding = "sliding"  # GQA sliding window, or DeepSeek-V4 SWA-only
    csa = "csa"  # DeepSeek-V4 compressed sparse attention (ratio 4, indexer top-k)
    hca = "hca"  # DeepSeek-V4 heavily compressed attention (ratio 128)


class Precision(BaseModel):
    """Storage formats per part of the model. GEMMs run at the rate of the weights' format."""

    model_config = ConfigDict(frozen=True)
    weights: Dtype = Dtype.bf16
    experts: Dtype = Dtype.bf16
    kv_cache: Dtype = Dtype.bf16
    indexer_cache: Dtype | None = None  # DeepSeek-V4 only


class ParamCounts(BaseModel):
    attention: int  # all layers
    dense_ffn: int
    routed_experts: int
    shared_experts: int
    router: int
    embedding: int
    lm_head: int
    other: int  # norms, mHC, indexer, compressors
    mtp: int  # next-token-prediction layers, not part of the stated size
    total: int
    active: int


class ModelSpec(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    source: str
    architecture: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    max_context: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    attention: AttentionKind
    layer_attention: tuple[LayerAttention, ...]
    sliding_window: int | None = None
    # MLA (DeepSeek-V3) and DeepSeek-V4 low-rank projections
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    o_groups: int | None = None
    o_lora_rank: int | None = None
    # DeepSeek-V4 indexer and mHC
    index_heads: int | None = None
    index_head_dim: int | None = None
    index_topk: int | None = None
    hc_mult: int | None = None
    hc_sinkhorn_iters: int | None = None
    # FFN
    intermediate_size: int | None = None  # dense FFN width
    moe_layers: tuple[bool, ...]
    num_experts: int = 0
    experts_per_token: int = 0
    num_shared_experts: int = 0
    moe_intermediate_size: int | None = None
    num_hash_layers: int = 0
    num_mtp_layers: int = 0
    # Publishers count "active" differently: Qwen includes the input embedding, DeepSeek and OpenAI do not.
    active_counts_embedding: bool = False
    precision: Precision

    def __hash__(self) -> int:  # caches key on the spec; equal specs share name, source and precision
        return hash((self.name, self.source, self.precision, self.num_layers, self.hidden_size))

    # ---- shape facts -------------------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layers)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @cached_property
    def layer_kind_counts(self) -> dict[LayerAttention, int]:
        counts: dict[LayerAttention, int] = {}
        for kind in self.layer_attention:
            counts[kind] = counts.get(kind, 0) + 1
        return counts

    def count_layers(self, kind: LayerAttention) -> int:
        return self.layer_kind_counts.get(kind, 0)

    @property
    def q_head_dim(self) -> int:
        """Query/key width per head in prefill (MLA: nope + rope)."""
        if self.attention == AttentionKind.mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim

    # ---- parameters ---------------------------------------------------------------------------------------
    def _attention_params_per_layer(self, kind: LayerAttention) -> int:
        h, n, d = self.hidden_size, self.num_heads, self.head_dim
        if self.attention == AttentionKind.gqa:
            return h * n * d + 2 * h * self.num_kv_heads * d + n * d * h
        if self.attention == AttentionKind.mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            return (
                h * self.q_lora_rank
                + self.q_lora_rank * n * qk
                + h * (self.kv_lora_rank + self.qk_rope_head_dim)
                + self.kv_lora_rank * n * (self.qk_nope_head_dim + self.v_head_dim)
                + n * self.v_head_dim * h
            )
        # DeepSeek-V4: q low-rank, one shared K=V head, grouped low-rank output
        params = h * self.q_lora_rank + self.q_lora_rank * n * d + h * d
        params += n * d * self.o_lora_rank + self.o_groups * self.o_lora_rank * h
        return params

    def _other_params_per_layer(self, kind: LayerAttention) -> int:
        h = self.hidden_size
        params = 2 * h  # two RMSNorms
        if self.attention == AttentionKind.dsv4:
            mix = self.hc_mult * h
            params += 2 * (
                mix * (2 * self.hc_mult + self.hc_mult**2) + mix
            )  # mHC pre/post/res maps, both blocks
            if kind in (LayerAttention.csa, LayerAttention.hca):
                params += 2 * h * self.head_dim  # compressor: KV and gate projections
            if kind == LayerAttention.csa:
                params += self.q_lora_rank * self.index_heads * self.index_head_dim  # indexer queries
                params += h * self.index_head_dim + h * self.index_heads  # indexer keys and head weights
                params += 2 * h * self.index_head_dim  # indexer compressor
        return params

    @cached_property
    def params(self) -> ParamCounts:
        h = self.hidden_size
        attention = sum(self._attention_params_per_layer(k) for k in self.layer_attention)
        other = sum(self._other_params_per_layer(k) for k in self.layer_attention) + h
        dense_ffn = self.num_dense_layers * 3 * h * (self.intermediate_size or 0)
        per_expert = 3 * h * (self.moe_intermediate_size or 0)
        routed = self.num_moe_layers * self.num_experts * per_expert
        shared = self.num_moe_layers * self.num_shared_experts * per_expert
        router = self.num_moe_layers * h * self.num_experts if self.is_moe else 0
        embedding = self.vocab_size * h
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * h
        total = attention + other + dense_ffn + routed + shared + router + embedding + lm_head
        # one MTP layer: a full decoder layer plus its projection of [embedding; hidden] and norms
        mtp_layer = self._attention_params_per_layer(self.layer_attention[-1]) + 2 * h * h + 4 * h
        mtp_layer += (
            (self.num_experts + self.num_shared_experts) * per_expert + h * self.num_experts
            if self.is_moe
            else 3 * h * (self.intermediate_size or 0)
        )
        mtp = self.num_mtp_layers * mtp_layer
        # Active: what one token touches, the input-embedding lookup excluded (a gather, not compute)
        active_experts = self.num_moe_layers * (self.experts_per_token + self.num_shared_experts) * per_expert
        active = attention + other + dense_ffn + active_experts + router + (lm_head or embedding)
        if self.active_counts_embedding and lm_head:
            active += embedding
        return ParamCounts(
            attention=attention,
            dense_ffn=dense_ffn,
            routed_experts=routed,
            shared_experts=shared,
            router=router,
            embedding=embedding,
            lm_head=lm_head,
            other=other,
            mtp=mtp,
            total=total,
            active=active,
        )

    @property
    def total_params(self) -> int:
        return self.params.total

    @property
    def active_params(self) -> int:
        return self.params.active

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights as stored (MTP layers included: engines load them)."""
        p, prec = self.params, self.precision
        expert_bytes = (p.routed_experts + self._mtp_expert_params()) * prec.experts.bytes
        embed_bytes = (p.embedding + p.lm_head) * 2.0  # embeddings and LM head stay in bf16
        rest = p.total + p.mtp - p.routed_experts - self._mtp_expert_params() - p.embedding - p.lm_head
        return expert_bytes + embed_bytes + rest * prec.weights.bytes

    def _mtp_expert_params(self) -> int:
        return (
            self.num_mtp_layers * self.num_experts * 3 * self.hidden_size * (self.moe_intermediate_size or 0)
        )

    # ---- KV cache -----------------------------------------------------------------------------------------
    def kv_bytes_per_layer(
        self, kind: LayerAttention, seq_len: int, kv_heads_local: int | None = None
    ) -> float:
        """KV-cache bytes one sequence of seq_len tokens holds in one layer (on one rank)."""
        kv = self.precision.kv_cache
        if self.attention == AttentionKind.gqa:
            heads = self.num_kv_heads if kv_heads_local is None else kv_heads_local
            tokens = min(seq_len, self.sliding_window) if kind == LayerAttention.sliding else seq_len
            return tokens * 2 * heads * self.head_dim * kv.bytes
        if self.attention == AttentionKind.mla:
            width = self.kv_lora_rank + self.qk_rope_head_dim
            per_token = (
                width * 2
                if kv.bytes >= 2
                else self.kv_lora_rank + self.qk_rope_head_dim * 2 + MLA_FP8_SCALE_BYTES
            )
            return seq_len * per_token
        entry = DSV4_MAIN_ENTRY_FP8 if kv.bytes < 2 else self.head_dim * 2
        window = min(seq_len, self.sliding_window) * entry
        if kind == LayerAttention.hca:
            return window + (seq_len // 128) * entry
        if kind == LayerAttention.csa:
            return window + (seq_len // 4) * (
                entry + DSV4_INDEXER_ENTRY[self.precision.indexer_cache or Dtype.fp8]
            )
        return window

    def kv_bytes_per_sequence(self, seq_len: int, kv_heads_local: int | None = None) -> float:
        """KV bytes of one sequence over all layers, plus DeepSeek-V4's per-sequence compressor state."""
        total = sum(
            n * self.kv_bytes_per_layer(k, seq_len, kv_heads_local) for k, n in self.layer_kind_counts.items()
        )
        if self.attention == AttentionKind.dsv4:
            total += self.count_layers(LayerAttention.csa) * DSV4_STATE_CSA
            total += self.count_layers(LayerAttention.hca) * DSV4_STATE_HCA
        return total

    def kv_bytes_per_token_asymptotic(self, kv_heads_local: int | None = None) -> float:
        """Bytes each further token adds once windows are full (the long-context growth rate)."""
        big, small = 1 << 20, (1 << 20) - 1024
        return (
            self.kv_bytes_per_sequence(big, kv_heads_local)
            - self.kv_bytes_per_sequence(small, kv_heads_local)
        ) / 1024

    @property
    def kv_bytes_per_token(self) -> float:
        return self.kv_bytes_per_token_asymptotic()

    def summary(self) -> dict:
        p = self.params
        return {
            "name": self.name,
            "source": self.source,
            "architecture": self.architecture,
            "attention": self.attention.value,
            "layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "heads": self.num_heads,
            "kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "experts": self.num_experts,
            "experts_per_token": self.experts_per_token,
            "shared_experts": self.num_shared_experts,
            "mtp_layers": self.num_mtp_layers,
            "max_context": self.max_context,
            "total_params": p.total,
            "active_params": p.active,
            "mtp_params": p.mtp,
            "weight_bytes": round(self.weight_bytes),
            "kv_bytes_per_token": round(self.kv_bytes_per_token, 1),
            "kv_dtype": self.precision.kv_cache.value,
            "precision": self.precision.model_dump(mode="json"),
            "layer_attention": {
                k.value: self.count_layers(k) for k in LayerAttention if self.count_layers(k)
            },
        }
