"""The attention of a model, one class per kind: GQA (with sliding-window layers), MLA (DeepSeek-V3 / R1),
MLA with DeepSeek's sparse attention (DSA: GLM-5, DeepSeek-V3.2), DeepSeek-V4's compressed attention and
the hybrid of Gated DeltaNet linear-attention layers with gated GQA layers (Qwen3.5, Qwen3-Next).
Each kind answers its own questions (parameters, KV-cache bytes, KV heads per rank, how tensor parallelism
may split it), so callers never branch on the kind.
"""

from abc import ABC, abstractmethod
from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from servelab.specs.dtypes import Dtype, Precision

# DeepSeek-V4 cache entry sizes: fp8 non-rope part + bf16 rope part + scales + pad
DSV4_MAIN_ENTRY_FP8 = 448 + 64 * 2 + 7 + 1
DSV4_INDEXER_ENTRY = {Dtype.fp8: 132, Dtype.fp8_block: 132, Dtype.fp4: 68, Dtype.mxfp4: 68, Dtype.nvfp4: 68}
# Per-sequence FP32 compressor state kept by the engines (an estimate)
DSV4_STATE_CSA = 32 * 1024 + 8 * 1024
DSV4_STATE_HCA = 512 * 1024
MLA_FP8_SCALE_BYTES = 16  # 512 fp8 latent values carry 4 fp32 block scales
# DSA's indexer cache: one fp8 key of index_head_dim values and an fp32 scale per 128 of them, whatever the
# main cache's dtype (SGLang 0.5.10 mem_cache/memory_pool.py NSATokenToKVPool: index_head_dim +
# index_head_dim // quant_block_size * 4 bytes a token, quant_block_size 128)
DSA_INDEX_SCALE_BLOCK = 128
# A linear-attention state's format by the name a config's mamba_ssm_dtype or SGLang's --mamba-ssm-dtype
# gives it (SGLang 0.5.10 configs/mamba_utils.py mamba2_state_dtype)
STATE_DTYPES = {"float32": Dtype.fp32, "bfloat16": Dtype.bf16, "float16": Dtype.fp16}


class MlaFp8KvLayout(StrEnum):
    """How an engine stores one token of an FP8 MLA cache (DeepSeek-V3 / R1: 512 latent + 64 rope dims)."""

    # fp8 latent + its fp32 block scales + the rope key in bf16 (512 + 16 + 128 = 656 bytes): DeepSeek's
    # FlashMLA FP8 format, vLLM's fp8_ds_mla (model_executor/layers/attention/mla_attention.py; vLLM 0.32
    # picks it for its sparse FlashMLA backend, a plain fp8 cache on the dense MLA backends is 576 bytes) and
    # SGLang's DeepSeek-V3.2 NSA store (mem_cache/memory_pool.py, nsa_kv_cache_store_fp8). The model default.
    flashmla = "flashmla"
    # latent and rope key both in fp8, kv_lora_rank + qk_rope_head_dim bytes (576): SGLang's MLATokenToKVPool
    # (mem_cache/memory_pool.py, kv_cache_dim) and TensorRT-LLM (from memory: its source was not available)
    fp8 = "fp8"

    def entry_bytes(self, kv_lora_rank: int, qk_rope_head_dim: int) -> int:
        """Bytes of one token's FP8 cache entry in one layer."""
        if self == MlaFp8KvLayout.fp8:
            return kv_lora_rank + qk_rope_head_dim
        return kv_lora_rank + MLA_FP8_SCALE_BYTES + qk_rope_head_dim * 2


class AttentionKind(StrEnum):
    gqa = "gqa"
    mla = "mla"
    dsa = "dsa"
    dsv4 = "dsv4"
    gdn = "gdn"  # Gated DeltaNet linear-attention layers and gated GQA full-attention layers


class LayerAttention(StrEnum):
    full = "full"  # GQA / MLA over the whole context
    sliding = "sliding"  # GQA sliding window, or DeepSeek-V4 SWA-only
    csa = "csa"  # DeepSeek-V4 compressed sparse attention (ratio 4, indexer top-k)
    hca = "hca"  # DeepSeek-V4 heavily compressed attention (ratio 128)
    linear = "linear"  # Gated DeltaNet linear attention: a fixed-size state per sequence, no KV cache


class _Attention(BaseModel, ABC):
    """What every kind has, and the answers shared by kinds that do not override them."""

    model_config = ConfigDict(frozen=True)
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt

    @model_validator(mode="after")
    def _kv_heads_divide_heads(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads {self.num_kv_heads} must divide num_heads {self.num_heads}")
        return self

    # Decode tokens run other projections than prefill tokens (MLA's absorbed up-projections)
    absorbed_decode: ClassVar[bool] = False
    default_kv_cache: ClassVar[Dtype] = Dtype.bf16
    default_indexer_cache: ClassVar[Dtype | None] = None

    @property
    def q_head_dim(self) -> int:
        """Query/key width per head in prefill."""
        return self.head_dim

    @property
    def kv_grows_linearly(self) -> bool:
        """Whether every token adds the same KV bytes (no window, no compression)."""
        return True

    @abstractmethod
    def params_per_layer(self, hidden: int, layer: LayerAttention) -> int: ...

    def module_params_per_layer(self, hidden: int, layer: LayerAttention) -> int:
        """Parameters of attention side modules (compressors, indexer), counted with norms as 'other'."""
        return 0

    def projection_params(self, hidden: int) -> dict[str, int]:
        """Weights of one layer's projections by the step graph's op that runs each, where a checkpoint can
        keep some of them unquantized (specs.quant_exclusions); empty where none is read."""
        return {}

    @abstractmethod
    def kv_bytes_per_layer(
        self, layer: LayerAttention, seq_len: int, precision: Precision, kv_heads_local: int | None = None
    ) -> float:
        """KV-cache bytes one sequence of seq_len tokens holds in one layer (on one rank)."""

    def state_bytes_per_layer(self, layer: LayerAttention, attn_tp: int = 1) -> int:
        """Per-sequence state a layer keeps besides its KV cache, on one of attn_tp attention ranks."""
        return 0

    def kv_heads_local(self, attn_tp: int) -> int:
        """KV heads each attention rank holds: one latent or shared head, whatever the split."""
        return 1

    def split_problem(self, attn_tp: int) -> str | None:
        """Why attention cannot split over attn_tp ranks (beyond the query heads dividing), or None."""
        return None


class GqaAttention(_Attention):
    """Grouped-query attention; sliding-window layers hold only the last sliding_window tokens."""

    kind: Literal[AttentionKind.gqa] = AttentionKind.gqa
    sliding_window: PositiveInt | None = None

    @property
    def kv_grows_linearly(self) -> bool:
        return self.sliding_window is None

    def params_per_layer(self, hidden: int, layer: LayerAttention) -> int:
        return sum(self.projection_params(hidden).values())

    def projection_params(self, hidden: int) -> dict[str, int]:
        """Weights of one layer's projections, by the step graph's op that runs each."""
        h, n, d = hidden, self.num_heads, self.head_dim
        return {"qkv_proj": h * n * d + 2 * h * self.num_kv_heads * d, "o_proj": n * d * h}

    def kv_bytes_per_layer(
        self, layer: LayerAttention, seq_len: int, precision: Precision, kv_heads_local: int | None = None
    ) -> float:
        heads = self.num_kv_heads if kv_heads_local is None else kv_heads_local
        window = self.sliding_window
        tokens = min(seq_len, window) if layer == LayerAttention.sliding and window is not None else seq_len
        return tokens * 2 * heads * self.head_dim * precision.kv_cache.bytes

    def kv_heads_local(self, attn_tp: int) -> int:
        """Replicated (at least one per rank) when attn_tp exceeds the KV heads."""
        return max(1, self.num_kv_heads // attn_tp)

    def split_problem(self, attn_tp: int) -> str | None:
        if attn_tp > self.num_kv_heads and attn_tp % self.num_kv_heads:
            return f"tp {attn_tp} is not a multiple of the {self.num_kv_heads} KV heads"
        return None


class MlaAttention(_Attention):
    """Multi-head latent attention: low-rank q, one compressed KV latent (plus a rope key) per token."""

    kind: Literal[AttentionKind.mla] = AttentionKind.mla
    q_lora_rank: PositiveInt
    kv_lora_rank: PositiveInt
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt
    fp8_kv_layout: MlaFp8KvLayout = MlaFp8KvLayout.flashmla  # the engine's (ModelSpec.with_mla_fp8_kv_layout)

    absorbed_decode: ClassVar[bool] = True

    @property
    def q_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def params_per_layer(self, hidden: int, layer: LayerAttention) -> int:
        return sum(self.projection_params(hidden).values())

    def projection_params(self, hidden: int) -> dict[str, int]:
        """Weights of one layer's projections, by the step graph's op that runs each."""
        h, n = hidden, self.num_heads
        return {
            "qkv_a_proj": h * self.q_lora_rank + h * (self.kv_lora_rank + self.qk_rope_head_dim),
            "q_b_proj": self.q_lora_rank * n * self.q_head_dim,
            "kv_b_proj": self.kv_lora_rank * n * (self.qk_nope_head_dim + self.v_head_dim),
            "o_proj": n * self.v_head_dim * h,
        }

    def kv_bytes_per_layer(
        self, layer: LayerAttention, seq_len: int, precision: Precision, kv_heads_local: int | None = None
    ) -> float:
        if precision.kv_cache.bytes >= 2:
            per_token = (self.kv_lora_rank + self.qk_rope_head_dim) * 2
        else:
            per_token = self.fp8_kv_layout.entry_bytes(self.kv_lora_rank, self.qk_rope_head_dim)
        return seq_len * per_token


class DsaAttention(MlaAttention):
    """MLA with DeepSeek's sparse attention (DSA, DeepSeek-V3.2 and GLM-5): a lightning indexer (index_heads
    fp8 query heads of index_head_dim against one cached fp8 key per token) scores every earlier token, and
    each query attends to the index_topk best of them."""

    kind: Literal[AttentionKind.dsa] = AttentionKind.dsa  # type: ignore[assignment]
    index_heads: PositiveInt
    index_head_dim: PositiveInt
    index_topk: PositiveInt

    @property
    def index_entry_bytes(self) -> int:
        """Bytes of one token's indexer key: fp8 values plus their fp32 block scales."""
        return self.index_head_dim + self.index_head_dim // DSA_INDEX_SCALE_BLOCK * 4

    def projection_params(self, hidden: int) -> dict[str, int]:
        """MLA's projections and the indexer's: its query up-projection from the q latent, and its key and
        per-head weight projections from the hidden state (the step graph's indexer_k_proj runs both)."""
        heads, dim = self.index_heads, self.index_head_dim
        return {
            **super().projection_params(hidden),
            "indexer_q_proj": self.q_lora_rank * heads * dim,
            "indexer_k_proj": hidden * (dim + heads),
        }

    def module_params_per_layer(self, hidden: int, layer: LayerAttention) -> int:
        """The indexer's key LayerNorm (weight and bias), counted with norms as 'other'."""
        return 2 * self.index_head_dim

    def kv_bytes_per_layer(
        self, layer: LayerAttention, seq_len: int, precision: Precision, kv_heads_local: int | None = None
    ) -> float:
        latent = super().kv_bytes_per_layer(layer, seq_len, precision, kv_heads_local)
        return latent + seq_len * self.index_entry_bytes


class Dsv4Attention(_Attention):
    """DeepSeek-V4: low-rank q, one shared K=V head, grouped low-rank output; layers attend over a sliding
    window plus compressed entries (CSA: ratio 4 with an indexer choosing the top-k; HCA: ratio 128)."""

    kind: Literal[AttentionKind.dsv4] = AttentionKind.dsv4
    q_lora_rank: PositiveInt
    qk_rope_head_dim: PositiveInt
    o_groups: PositiveInt
    o_lora_rank: PositiveInt
    index_heads: PositiveInt
    index_head_dim: PositiveInt
    index_topk: PositiveInt
    sliding_window: PositiveInt

    default_kv_cache: ClassVar[Dtype] = Dtype.fp8
    default_indexer_cache: ClassVar[Dtype | None] = Dtype.fp8

    @property
    def kv_grows_linearly(self) -> bool:
        return False

    def params_per_layer(self, hidden: int, layer: LayerAttention) -> int:
        h, n, d = hidden, self.num_heads, self.head_dim
        params = h * self.q_lora_rank + self.q_lora_rank * n * d + h * d
        return params + n * d * self.o_lora_rank + self.o_groups * self.o_lora_rank * h

    def module_params_per_layer(self, hidden: int, layer: LayerAttention) -> int:
        h, params = hidden, 0
        if layer in (LayerAttention.csa, LayerAttention.hca):
            params += 2 * h * self.head_dim  # compressor: KV and gate projections
        if layer == LayerAttention.csa:
            params += self.q_lora_rank * self.index_heads * self.index_head_dim  # indexer queries
            params += h * self.index_head_dim + h * self.index_heads  # indexer keys and head weights
            params += 2 * h * self.index_head_dim  # indexer compressor
        return params

    def kv_bytes_per_layer(
        self, layer: LayerAttention, seq_len: int, precision: Precision, kv_heads_local: int | None = None
    ) -> float:
        entry = DSV4_MAIN_ENTRY_FP8 if precision.kv_cache.bytes < 2 else self.head_dim * 2
        window = min(seq_len, self.sliding_window) * entry
        if layer == LayerAttention.hca:
            return window + (seq_len // 128) * entry
        if layer == LayerAttention.csa:
            indexer = DSV4_INDEXER_ENTRY[precision.indexer_cache or Dtype.fp8]
            return window + (seq_len // 4) * (entry + indexer)
        return window

    def state_bytes_per_layer(self, layer: LayerAttention, attn_tp: int = 1) -> int:
        return {LayerAttention.csa: DSV4_STATE_CSA, LayerAttention.hca: DSV4_STATE_HCA}.get(layer, 0)


class GdnAttention(GqaAttention):
    """Qwen3.5's and Qwen3-Next's hybrid: Gated DeltaNet linear-attention layers (`linear`) and, every few
    layers, GQA whose output is gated by a sigmoid of a second query-sized projection (`full`). A linear layer
    keeps no KV cache: each sequence holds a recurrent state of linear_value_heads x key_dim x value_dim in
    state_dtype and a causal-conv1d window of conv_kernel - 1 tokens over its q, k and v channels, both split
    over tensor parallelism by heads (SGLang 0.5.10 models/qwen3_5.py Qwen3_5GatedDeltaNet;
    configs/mamba_utils.py Mamba2StateShape and mamba_cache_per_req)."""

    kind: Literal[AttentionKind.gdn] = AttentionKind.gdn  # type: ignore[assignment]
    output_gate: bool = True
    linear_key_heads: PositiveInt
    linear_value_heads: PositiveInt
    linear_key_dim: PositiveInt
    linear_value_dim: PositiveInt
    conv_kernel: PositiveInt
    # the recurrent state's format: the config's mamba_ssm_dtype (SGLang 0.5.10 configs/mamba_utils.py
    # mamba2_state_dtype: float32 unless the config or SGLANG_MAMBA_SSM_DTYPE says otherwise); the conv
    # window is bf16 (SGLANG_MAMBA_CONV_DTYPE's default)
    state_dtype: Dtype = Dtype.fp32

    @model_validator(mode="after")
    def _key_heads_divide_value_heads(self):
        if self.linear_value_heads % self.linear_key_heads:
            raise ValueError(
                f"linear_key_heads {self.linear_key_heads} must divide linear_value_heads "
                f"{self.linear_value_heads}"
            )
        return self

    @property
    def kv_grows_linearly(self) -> bool:
        return False  # a fixed state per sequence besides the full layers' KV

    @property
    def conv_channels(self) -> int:
        """Channels of the causal conv1d: the linear layer's queries, keys and values."""
        return (
            2 * self.linear_key_heads * self.linear_key_dim + self.linear_value_heads * self.linear_value_dim
        )

    def params_per_layer(self, hidden: int, layer: LayerAttention) -> int:
        if layer != LayerAttention.linear:
            return sum(self.projection_params(hidden).values())
        h, vd = hidden, self.linear_value_heads * self.linear_value_dim
        in_proj = h * (self.conv_channels + vd) + h * 2 * self.linear_value_heads  # qkvz, and b and a
        return in_proj + self.conv_channels * self.conv_kernel + vd * h

    def module_params_per_layer(self, hidden: int, layer: LayerAttention) -> int:
        """A linear layer's decay and time-step parameters per value head and its gated norm's weight."""
        return 2 * self.linear_value_heads + self.linear_value_dim if layer == LayerAttention.linear else 0

    def projection_params(self, hidden: int) -> dict[str, int]:
        """A full-attention layer's projections: the query projection also makes the output gate."""
        h, n, d = hidden, self.num_heads, self.head_dim
        q = n * d * (2 if self.output_gate else 1)
        return {"qkv_proj": h * q + 2 * h * self.num_kv_heads * d, "o_proj": n * d * h}

    def kv_bytes_per_layer(
        self, layer: LayerAttention, seq_len: int, precision: Precision, kv_heads_local: int | None = None
    ) -> float:
        if layer == LayerAttention.linear:
            return 0.0
        return super().kv_bytes_per_layer(layer, seq_len, precision, kv_heads_local)

    def state_bytes_per_layer(self, layer: LayerAttention, attn_tp: int = 1) -> int:
        """A linear layer's recurrent state and conv window on one rank (heads split over attn_tp)."""
        if layer != LayerAttention.linear:
            return 0
        heads = -(-self.linear_value_heads // attn_tp)
        recurrent = heads * self.linear_key_dim * self.linear_value_dim * int(self.state_dtype.bytes)
        conv = -(-self.conv_channels // attn_tp) * (self.conv_kernel - 1) * 2
        return recurrent + conv

    def split_problem(self, attn_tp: int) -> str | None:
        if self.linear_key_heads % attn_tp:
            return f"tp {attn_tp} does not divide the {self.linear_key_heads} linear-attention key heads"
        return super().split_problem(attn_tp)


Attention = Annotated[
    GqaAttention | MlaAttention | DsaAttention | Dsv4Attention | GdnAttention, Field(discriminator="kind")
]
