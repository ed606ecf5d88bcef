"""ModelSpec: the architecture of one checkpoint, parsed once from a Hugging Face config.json.

A model is composed of parts: its attention (one class per kind), its experts (MoE, or none), its
next-token-prediction layers (MTP, or none) and DeepSeek-V4's hyper-connections (or none). It answers
parameter counts, weight bytes and KV-cache bytes; the step model reads its shapes.
"""

from collections import Counter
from functools import cached_property

from pydantic import BaseModel, ConfigDict, NonNegativeInt, PositiveInt, model_validator

from servelab.specs.attention import Attention, LayerAttention, MlaAttention, MlaFp8KvLayout
from servelab.specs.dtypes import Dtype, Precision


class MoE(BaseModel):
    """Routed experts (and always-active shared ones) in some of the decoder layers."""

    model_config = ConfigDict(frozen=True)
    num_experts: PositiveInt
    experts_per_token: PositiveInt
    num_shared_experts: NonNegativeInt = 0
    intermediate_size: PositiveInt  # width of one expert
    layers: tuple[bool, ...]  # per decoder layer: routes to experts
    num_hash_layers: NonNegativeInt = 0  # the first layers route by token hash (no router GEMM)
    # the format the router GEMM runs in: the checkpoint's bf16, unless the engine serving the model keeps the
    # gate in float32 (EngineProfile.model_as_served sets it from the engine's rule)
    router_dtype: Dtype = Dtype.bf16

    @model_validator(mode="after")
    def _top_k_within_experts(self) -> "MoE":
        # more experts per token than experts would count active parameters above the total
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"experts_per_token {self.experts_per_token} exceeds num_experts {self.num_experts}"
            )
        return self

    @property
    def num_layers(self) -> int:
        return sum(self.layers)

    def expert_params(self, hidden: int) -> int:
        return 3 * hidden * self.intermediate_size  # gate, up and down projections

    def router_params(self, hidden: int) -> int:
        return hidden * self.num_experts

    def layer_params(self, hidden: int) -> int:
        """One MoE layer: every expert and the router."""
        experts = (self.num_experts + self.num_shared_experts) * self.expert_params(hidden)
        return experts + self.router_params(hidden)

    def active_layer_params(self, hidden: int) -> int:
        """The experts one token runs through in one MoE layer (router excluded)."""
        return (self.experts_per_token + self.num_shared_experts) * self.expert_params(hidden)


class Mtp(BaseModel):
    """Next-token-prediction layers: draft tokens for speculative decoding, not part of the stated size."""

    model_config = ConfigDict(frozen=True)
    num_layers: PositiveInt


class HyperConnections(BaseModel):
    """DeepSeek-V4's manifold-constrained hyper-connections: `mult` residual streams per token, mixed around
    both blocks of every layer by maps projected with Sinkhorn iterations."""

    model_config = ConfigDict(frozen=True)
    mult: PositiveInt
    sinkhorn_iters: PositiveInt

    def params_per_layer(self, hidden: int) -> int:
        mix = self.mult * hidden
        return 2 * (mix * (2 * self.mult + self.mult**2) + mix)  # pre/post/res maps, both blocks


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
    mtp_routed_experts: int  # the routed experts among them (stored in the experts' format)
    total: int
    active: int


class ModelSpec(BaseModel):
    """Sizes every decoder-only model has, plus its parts: attention (one class per kind), and where the model
    has them, experts, MTP layers and hyper-connections."""

    model_config = ConfigDict(frozen=True)

    name: str
    source: str
    architecture: str
    num_layers: PositiveInt
    hidden_size: PositiveInt
    vocab_size: PositiveInt
    tie_word_embeddings: bool = False
    max_context: PositiveInt
    attention: Attention
    layer_attention: tuple[LayerAttention, ...]
    intermediate_size: PositiveInt | None = None  # dense FFN width
    moe: MoE | None = None
    mtp: Mtp | None = None
    hyper_connections: HyperConnections | None = None
    # Publishers count "active" differently: Qwen includes the input embedding, DeepSeek and OpenAI do not.
    active_counts_embedding: bool = False
    precision: Precision

    @model_validator(mode="after")
    def _layers_agree(self) -> "ModelSpec":
        per_layer = {"layer_attention": len(self.layer_attention)}
        if self.moe is not None:
            per_layer["moe.layers"] = len(self.moe.layers)
        for name, n in per_layer.items():
            if n != self.num_layers:
                raise ValueError(f"{name} has {n} entries for {self.num_layers} layers")
        return self

    def __hash__(self) -> int:  # caches key on the spec; equal specs share name, source and precision
        return hash((self.name, self.source, self.precision, self.num_layers, self.hidden_size))

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    # ---- shape facts -------------------------------------------------------------------------------------
    @property
    def num_mtp_layers(self) -> int:
        return self.mtp.num_layers if self.mtp else 0

    @property
    def num_moe_layers(self) -> int:
        return self.moe.num_layers if self.moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def residual_streams(self) -> int:
        """Hidden-state copies each token carries between layers (hyper-connections widen the residual)."""
        return self.hyper_connections.mult if self.hyper_connections else 1

    @cached_property
    def layer_kind_counts(self) -> dict[LayerAttention, int]:
        return dict(Counter(self.layer_attention))

    def count_layers(self, kind: LayerAttention) -> int:
        return self.layer_kind_counts.get(kind, 0)

    @cached_property
    def layer_groups(self) -> list[tuple[tuple[LayerAttention, bool, bool], int]]:
        """Layers grouped by (attention kind, MoE, hash-routed) with their counts."""
        moe_layers = self.moe.layers if self.moe else (False,) * self.num_layers
        hashed = self.moe.num_hash_layers if self.moe else 0
        groups = Counter((kind, moe_layers[i], i < hashed) for i, kind in enumerate(self.layer_attention))
        return list(groups.items())

    # ---- parameters ---------------------------------------------------------------------------------------
    @cached_property
    def params(self) -> ParamCounts:
        h, att, moe = self.hidden_size, self.attention, self.moe
        attention = sum(att.params_per_layer(h, k) for k in self.layer_attention)
        mhc = self.hyper_connections.params_per_layer(h) if self.hyper_connections else 0
        other = sum(2 * h + mhc + att.module_params_per_layer(h, k) for k in self.layer_attention) + h
        dense_ffn = self.num_dense_layers * 3 * h * (self.intermediate_size or 0)
        moe_layers = self.num_moe_layers
        routed = moe_layers * moe.num_experts * moe.expert_params(h) if moe else 0
        shared = moe_layers * moe.num_shared_experts * moe.expert_params(h) if moe else 0
        router = moe_layers * moe.router_params(h) if moe else 0
        embedding = self.vocab_size * h
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * h
        total = attention + other + dense_ffn + routed + shared + router + embedding + lm_head
        # one MTP layer: a full decoder layer plus its projection of [embedding; hidden] and norms
        mtp_layer = att.params_per_layer(h, self.layer_attention[-1]) + 2 * h * h + 4 * h
        mtp_layer += moe.layer_params(h) if moe else 3 * h * (self.intermediate_size or 0)
        mtp = self.num_mtp_layers * mtp_layer
        mtp_routed = self.num_mtp_layers * moe.num_experts * moe.expert_params(h) if moe else 0
        # Active: what one token touches, the input-embedding lookup excluded (a gather, not compute)
        active_experts = moe_layers * moe.active_layer_params(h) if moe else 0
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
            mtp_routed_experts=mtp_routed,
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
    def unquantized_attention_params(self) -> int:
        """Weights of the attention projections the checkpoint keeps unquantized, in all decoder layers (the
        MTP layers' not counted)."""
        if not self.precision.unquantized:
            return 0
        per_layer = self.attention.projection_params(self.hidden_size)
        return self.num_layers * sum(n for op, n in per_layer.items() if op in self.precision.unquantized)

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights as stored (MTP layers included: engines load them)."""
        p, prec = self.params, self.precision
        expert_bytes = (p.routed_experts + p.mtp_routed_experts) * prec.experts.bytes
        embed_bytes = (p.embedding + p.lm_head) * 2.0  # embeddings and LM head stay in bf16
        bf16 = self.unquantized_attention_params
        rest = p.total + p.mtp - p.routed_experts - p.mtp_routed_experts - p.embedding - p.lm_head - bf16
        return expert_bytes + embed_bytes + bf16 * 2.0 + rest * prec.weights.bytes

    # ---- KV cache -----------------------------------------------------------------------------------------
    def kv_bytes_per_layer(
        self, kind: LayerAttention, seq_len: int, kv_heads_local: int | None = None
    ) -> float:
        """KV-cache bytes one sequence of seq_len tokens holds in one layer (on one rank)."""
        return self.attention.kv_bytes_per_layer(kind, seq_len, self.precision, kv_heads_local)

    def with_mla_fp8_kv_layout(self, layout: MlaFp8KvLayout | None) -> "ModelSpec":
        """This model as an engine that stores its FP8 MLA cache in `layout` holds it (None, or a model
        without MLA: unchanged), so every KV count of that engine reads the one number."""
        att = self.attention
        if layout is None or not isinstance(att, MlaAttention) or att.fp8_kv_layout == layout:
            return self
        return self.model_copy(update={"attention": att.model_copy(update={"fp8_kv_layout": layout})})

    def with_state_dtype(self, dtype: Dtype) -> "ModelSpec":
        """This model with its linear-attention state kept in `dtype` (SGLang's --mamba-ssm-dtype); a model
        without such a state: unchanged."""
        att = self.attention
        if getattr(att, "state_dtype", dtype) == dtype:
            return self
        return self.model_copy(update={"attention": att.model_copy(update={"state_dtype": dtype})})

    def with_router_dtype(self, dtype: Dtype) -> "ModelSpec":
        """This model with its router GEMM run in `dtype` (a model without experts: unchanged)."""
        moe = self.moe
        if moe is None or moe.router_dtype == dtype:
            return self
        return self.model_copy(update={"moe": moe.model_copy(update={"router_dtype": dtype})})

    def kv_bytes_per_sequence(
        self, seq_len: int, kv_heads_local: int | None = None, attn_tp: int = 1
    ) -> float:
        """KV bytes of one sequence over all layers, plus the per-sequence state some layers keep (on one of
        attn_tp attention ranks, where the state splits by heads)."""
        counts = self.layer_kind_counts.items()
        total = sum(n * self.kv_bytes_per_layer(k, seq_len, kv_heads_local) for k, n in counts)
        return total + sum(n * self.attention.state_bytes_per_layer(k, attn_tp) for k, n in counts)

    def state_bytes_per_sequence(self, attn_tp: int = 1) -> int:
        """The fixed per-sequence state of all layers (linear attention's, DeepSeek-V4's compressors'), on one
        of attn_tp attention ranks."""
        return sum(
            n * self.attention.state_bytes_per_layer(k, attn_tp) for k, n in self.layer_kind_counts.items()
        )

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
        p, att, moe = self.params, self.attention, self.moe
        return {
            "name": self.name,
            "source": self.source,
            "architecture": self.architecture,
            "attention": att.kind.value,
            "layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "heads": att.num_heads,
            "kv_heads": att.num_kv_heads,
            "head_dim": att.head_dim,
            "experts": moe.num_experts if moe else 0,
            "experts_per_token": moe.experts_per_token if moe else 0,
            "shared_experts": moe.num_shared_experts if moe else 0,
            "mtp_layers": self.num_mtp_layers,
            "max_context": self.max_context,
            "total_params": p.total,
            "active_params": p.active,
            "mtp_params": p.mtp,
            "weight_bytes": round(self.weight_bytes),
            "kv_bytes_per_token": round(self.kv_bytes_per_token, 1),
            "state_bytes_per_sequence": self.state_bytes_per_sequence(),
            "kv_dtype": self.precision.kv_cache.value,
            "precision": self.precision.model_dump(mode="json"),
            "layer_attention": {
                k.value: self.count_layers(k) for k in LayerAttention if self.count_layers(k)
            },
        }
