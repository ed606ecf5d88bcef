"""Build a ModelSpec from a Hugging Face config.json (dict), whatever family it describes."""

from pydantic import ValidationError

from servelab.errors import ServelabError
from servelab.specs.attention import (
    STATE_DTYPES,
    Attention,
    DsaAttention,
    Dsv4Attention,
    GdnAttention,
    GqaAttention,
    LayerAttention,
    MlaAttention,
)
from servelab.specs.dtypes import Dtype, Precision, parse_dtype
from servelab.specs.model import HyperConnections, ModelSpec, MoE, Mtp
from servelab.specs.quant_exclusions import unquantized_ops

MAX_SIZE = 1 << 40  # beyond any real width, count or vocabulary: a typo or a hostile file
MAX_LAYERS = 1 << 16  # a tuple per layer is built; 10^12 layers would exhaust memory


def _describe(value) -> str:
    """A JSON value as the file has it, and what kind of wrong it is."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a bool)"
    if isinstance(value, int | float):
        return f"{value!r} (a float)" if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return f"{value!r} (a string)"
    if value is None:
        return "null"
    return "a list of other things" if isinstance(value, list) else "an object"


class _Config:
    """Typed reads of one config.json; every error is one line naming the file and the key."""

    def __init__(self, cfg: dict, where: str):
        self.cfg = cfg
        self.where = where

    def error(self, key: str, message: str) -> ServelabError:
        return ServelabError(f"{self.where}: {key}: {message}")

    def find(self, *names: str) -> tuple[str, object]:
        """The first of `names` set (not null), and its value; (names[0], None) when none is."""
        for name in names:
            if self.cfg.get(name) is not None:
                return name, self.cfg[name]
        return names[0], None

    def has(self, *names: str) -> bool:
        return self.find(*names)[1] is not None

    def integer(
        self, *names: str, default: int | None = None, minimum: int = 1, maximum: int = MAX_SIZE
    ) -> int:
        value = self.opt_integer(*names, minimum=minimum, maximum=maximum)
        if value is not None:
            return value
        if default is None:
            raise ServelabError(f"{self.where}: missing field {names[0]!r}")
        return default

    def opt_integer(self, *names: str, minimum: int = 1, maximum: int = MAX_SIZE) -> int | None:
        key, value = self.find(*names)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(key, f"expected an integer >= {minimum}, got {_describe(value)}")
        if value > maximum:
            raise self.error(key, f"{value} exceeds the maximum {maximum}")
        return value

    def flag(self, name: str, obj: dict | None = None) -> bool:
        value = (self.cfg if obj is None else obj).get(name)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.error(name, f"expected true or false, got {_describe(value)}")
        return value

    def list_of(self, name: str, item: type) -> list | None:
        value = self.cfg.get(name)
        if value is None:
            return None
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, item) for v in value):
            what = "strings" if item is str else "integers"
            got = "a list of other things" if isinstance(value, list) else _describe(value)
            raise self.error(name, f"expected a list of {what}, got {got}")
        return value

    def obj(self, name: str) -> dict:
        value = self.cfg.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(name, f"expected a JSON object, got {_describe(value)}")
        return value


# checkpoint dtypes a config.json may declare (`torch_dtype`, or `dtype` in newer transformers); servelab
# prices unquantized weights as bf16 whichever of these it is, but a dtype outside them is a broken config
CHECKPOINT_DTYPES = {"bfloat16", "float16", "float32", "float", "half", "bf16", "fp16", "fp32", "auto"}


def _default_precision(c: _Config, attention: Attention) -> Precision:
    key, declared = c.find("torch_dtype", "dtype")
    if declared is not None and str(declared).lower().removeprefix("torch.") not in CHECKPOINT_DTYPES:
        raise c.error(
            key, f"unknown dtype {declared!r}; expected one of {', '.join(sorted(CHECKPOINT_DTYPES))}"
        )
    quant = c.obj("quantization_config")
    method = str(quant.get("quant_method", "")).lower()
    weights = Dtype.bf16
    experts = Dtype.bf16
    if method == "fp8":
        weights = Dtype.fp8_block if quant.get("weight_block_size") else Dtype.fp8
        experts = weights
    elif method in ("mxfp4", "nvfp4", "modelopt_fp4"):
        experts = Dtype.mxfp4 if method == "mxfp4" else Dtype.nvfp4
        if method != "mxfp4":
            weights = experts
    elif method == "compressed-tensors" and _int4_weight_only(c, quant):
        experts = Dtype.int4
        if not any("self_attn" in pattern for pattern in _exclusions(c, quant)):
            # the attention is quantized too, so every linear layer is INT4 (Kimi-K2's `ignore` keeps all but
            # the routed experts in BF16)
            weights = Dtype.int4
    elif method == "modelopt":  # a ModelOpt config names its format in quant_algo (hf_quant_config.json)
        algo = str(quant.get("quant_algo", "")).upper()
        if algo == "FP8":
            weights = experts = Dtype.fp8
        elif algo == "NVFP4":
            weights = experts = Dtype.nvfp4
    if quant.get("expert_dtype"):
        value = quant["expert_dtype"]
        if not isinstance(value, str):
            raise c.error(
                "quantization_config.expert_dtype", f"expected a dtype name, got {_describe(value)}"
            )
        try:
            experts = parse_dtype(value, "expert_dtype")
        except ServelabError as e:
            raise c.error("quantization_config.expert_dtype", e.message) from None
    kv = attention.default_kv_cache
    if method.startswith("modelopt") and _declares_fp8_kv(quant):
        kv = Dtype.fp8  # the engines' `auto` KV cache is the declared one (servelab.engines.kv_cache)
    unquantized: tuple[str, ...] = ()
    if method.startswith("modelopt") and weights not in (Dtype.bf16, Dtype.fp16):
        if _experts_alone_quantized(_exclusions(c, quant), attention):
            weights = Dtype.bf16  # every GEMM but the routed experts' stays in the checkpoint's BF16
        else:
            unquantized = unquantized_ops(_exclusions(c, quant))
    return Precision(
        weights=weights,
        experts=experts,
        kv_cache=kv,
        indexer_cache=attention.default_indexer_cache,
        unquantized=unquantized,
    )


def _exclusions(c: _Config, quant: dict) -> list[str]:
    """A ModelOpt config's module exclusions, where vLLM 0.32.0 reads them (modelopt.py
    ModelOptQuantConfigBase.from_config): `exclude_modules` in hf_quant_config.json, `ignore` in
    config.json."""
    key = "exclude_modules" if "exclude_modules" in quant else "ignore"
    value = quant.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise c.error(
            f"quantization_config.{key}", f"expected a list of module names, got {_describe(value)}"
        )
    return value


# the module blocks of a Gated DeltaNet hybrid's layers besides its routed experts (Qwen3.5's names)
_GDN_BLOCKS = ("linear_attn", "self_attn", "shared_expert")


def _experts_alone_quantized(exclusions: list[str], attention: Attention) -> bool:
    """Whether a Gated DeltaNet hybrid's quantization config keeps both attentions and the shared expert
    out of the quantization (NVIDIA's Qwen3.5-397B-A17B-NVFP4 names all three in every layer): the routed
    experts are then its only quantized GEMMs."""
    return isinstance(attention, GdnAttention) and all(
        any(block in pattern for pattern in exclusions) for block in _GDN_BLOCKS
    )


def _int4_weight_only(c: _Config, quant: dict) -> bool:
    """Whether a compressed-tensors config quantizes its weights to INT4 with no activation quantization
    (W4A16, as vLLM 0.32.0 reads it: compressed_tensors.py _is_wNa16_group_channel). Only Kimi-K2's layout,
    symmetric with one scale per 32 values, is priced (Dtype.int4); another group size or an asymmetric one
    stores other scales and is refused rather than priced as if it were the same."""
    groups = quant.get("config_groups")
    if not isinstance(groups, dict):
        return False
    found = False
    for name, group in groups.items():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict) or weights.get("type") != "int" or weights.get("num_bits") != 4:
            continue
        if group.get("input_activations") is not None:
            continue  # W4A8 and the like: not weight-only
        key = f"quantization_config.config_groups.{name}.weights"
        if weights.get("group_size") != 32 or weights.get("symmetric") is not True:
            raise c.error(
                key,
                f"INT4 weights with group_size {weights.get('group_size')!r} and symmetric "
                f"{weights.get('symmetric')!r} are not priced (servelab prices symmetric INT4 with "
                "group_size 32, Kimi-K2's)",
            )
        found = True
    return found


def _declares_fp8_kv(quant: dict) -> bool:
    """Whether a ModelOpt quantization config declares an FP8 KV cache, read as vLLM 0.25 reads it
    (utils/torch_utils.py get_kv_cache_quant_algo_string): kv_cache_scheme or kv_cache_quant_algo, at the
    top or under `quantization`, either the name FP8 or {num_bits: 8, type: float, dynamic: false}."""
    inner = quant.get("quantization")
    inner = inner if isinstance(inner, dict) else quant
    algo = (
        inner.get("kv_cache_scheme")
        or quant.get("kv_cache_scheme")
        or inner.get("kv_cache_quant_algo")
        or quant.get("kv_cache_quant_algo")
    )
    if isinstance(algo, dict):
        return algo.get("num_bits") == 8 and algo.get("type") == "float" and algo.get("dynamic") is False
    return isinstance(algo, str) and algo.strip().lower() in ("fp8", "fp8_e4m3")


def model_from_hf_config(cfg: dict, name: str, source: str, where: str = "config.json") -> ModelSpec:
    if not isinstance(cfg, dict):
        raise ServelabError(f"{where}: expected a JSON object")
    if _is_multimodal(cfg):
        cfg, where = _text_model(cfg, where), f"{where}: text_config"
    try:
        return _build(_Config(cfg, where), name, source)
    except ValidationError as e:  # the spec's own bounds: a combination the checks here did not catch
        raise ServelabError.from_validation(e, where) from None


def _is_multimodal(cfg: dict) -> bool:
    """A config that nests its language model in `text_config` (a text model has its own layer count)."""
    layers = ("num_hidden_layers", "n_layers", "num_layers")
    return "text_config" in cfg and all(cfg.get(k) is None for k in layers)


def _text_model(cfg: dict, where: str) -> dict:
    """The language model of a multimodal config (Kimi-K2.5's KimiK25ForConditionalGeneration): its
    `text_config`, with the quantization config of the whole checkpoint where the top level has one (NVIDIA's
    NVFP4 release) and the text config's otherwise (Moonshot's INT4 one). The vision tower
    (`vision_config`) is left out: a text benchmark never runs it. vLLM 0.32.0 serves such a model as its text
    config's architecture (models/kimi_k25.py builds `language_model` with init_vllm_registered_model), so
    the spec keeps that architecture (DeepseekV3ForCausalLM) too. A config with its own layer count is a text
    model already."""
    text = cfg["text_config"]
    if not isinstance(text, dict):
        raise ServelabError(f"{where}: text_config: expected a JSON object, got {_describe(text)}")
    quant = cfg.get("quantization_config", text.get("quantization_config"))
    merged = {**text, "quantization_config": quant} if quant is not None else dict(text)
    if "architectures" not in text and "architectures" in cfg:
        # Qwen3.5's text_config names no architecture: the engines serve the wrapper's
        # (SGLang 0.5.10 models/qwen3_5.py Qwen3_5MoeForConditionalGeneration)
        merged["architectures"] = cfg["architectures"]
    if "_servelab" in cfg:
        merged["_servelab"] = cfg["_servelab"]
    return merged


def _build(c: _Config, name: str, source: str) -> ModelSpec:
    layers = c.integer("num_hidden_layers", "n_layers", "num_layers", maximum=MAX_LAYERS)
    hidden = c.integer("hidden_size", "d_model", "dim")
    heads = c.integer("num_attention_heads", "n_heads")
    kv_heads = c.integer("num_key_value_heads", "n_kv_heads", default=heads)
    vocab = c.integer("vocab_size")
    if kv_heads > heads or heads % kv_heads:
        raise c.error(
            c.find("num_key_value_heads", "n_kv_heads")[0],
            f"{kv_heads} KV heads must divide the {heads} attention heads",
        )
    attention: GqaAttention | MlaAttention | DsaAttention | Dsv4Attention | GdnAttention
    hyper = None  # DeepSeek-V4 only
    if c.has("compress_ratios"):
        attention, layer_attention = _dsv4_attention(c, layers, heads, kv_heads)
        hyper = HyperConnections(
            mult=c.integer("hc_mult", default=4), sinkhorn_iters=c.integer("hc_sinkhorn_iters", default=20)
        )
    elif c.has("kv_lora_rank"):
        attention, layer_attention = _mla_attention(c, layers, heads, kv_heads)
    elif c.has("linear_num_value_heads"):
        attention, layer_attention = _gdn_attention(c, layers, heads, kv_heads)
    else:
        attention, layer_attention = _gqa_attention(c, layers, hidden, heads, kv_heads)
    inter = c.opt_integer("intermediate_size")
    moe = _moe(c, layers, inter)
    if inter is None and (moe is None or not all(moe.layers)):  # dense FFN layers need their width
        raise ServelabError(f"{c.where}: missing field 'intermediate_size'")
    mtp_layers = c.integer(
        "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0, minimum=0, maximum=MAX_LAYERS
    )
    architectures = c.list_of("architectures", str) or ["unknown"]
    return ModelSpec(
        name=name,
        source=source,
        architecture=architectures[0],
        num_layers=layers,
        hidden_size=hidden,
        vocab_size=vocab,
        tie_word_embeddings=c.flag("tie_word_embeddings"),
        max_context=c.integer("max_position_embeddings", "max_seq_len", default=4096),
        attention=attention,
        layer_attention=layer_attention,
        intermediate_size=inter,
        moe=moe,
        mtp=Mtp(num_layers=mtp_layers) if mtp_layers else None,
        hyper_connections=hyper,
        active_counts_embedding=c.flag("active_counts_embedding", c.obj("_servelab")),
        precision=_default_precision(c, attention),
    )


Layers = tuple[LayerAttention, ...]
_DSV4_RATIOS = {0: LayerAttention.sliding, 4: LayerAttention.csa, 128: LayerAttention.hca}


def _dsv4_attention(c: _Config, layers: int, heads: int, kv_heads: int) -> tuple[Dsv4Attention, Layers]:
    ratios = (c.list_of("compress_ratios", int) or [])[:layers]
    if len(ratios) != layers:
        raise c.error("compress_ratios", f"{len(ratios)} entries for {layers} layers")
    if any(r not in _DSV4_RATIOS for r in ratios):
        raise c.error("compress_ratios", "entries must be 0, 4 or 128")
    o_groups = c.integer("o_groups")
    if heads % o_groups:
        raise c.error("o_groups", f"{o_groups} groups must divide the {heads} attention heads")
    attention = Dsv4Attention(
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=c.integer("head_dim"),
        qk_rope_head_dim=c.integer("qk_rope_head_dim", default=64),
        q_lora_rank=c.integer("q_lora_rank"),
        o_groups=o_groups,
        o_lora_rank=c.integer("o_lora_rank"),
        index_heads=c.integer("index_n_heads", default=64),
        index_head_dim=c.integer("index_head_dim", default=128),
        index_topk=c.integer("index_topk", default=1024),
        sliding_window=c.integer("sliding_window", default=128),
    )
    return attention, tuple(_DSV4_RATIOS[r] for r in ratios)


def _mla_attention(
    c: _Config, layers: int, heads: int, kv_heads: int
) -> tuple[MlaAttention | DsaAttention, Layers]:
    if not c.has("q_lora_rank"):
        raise ServelabError(f"{c.where}: MLA without q_lora_rank is not supported")
    v_head_dim = c.integer("v_head_dim")
    mla = {
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": v_head_dim,
        "q_lora_rank": c.integer("q_lora_rank"),
        "kv_lora_rank": c.integer("kv_lora_rank"),
        "qk_nope_head_dim": c.integer("qk_nope_head_dim"),
        "qk_rope_head_dim": c.integer("qk_rope_head_dim"),
        "v_head_dim": v_head_dim,
    }
    layer_attention = (LayerAttention.full,) * layers
    if not c.has("index_topk"):
        return MlaAttention(**mla), layer_attention
    # DeepSeek's sparse attention (GLM-5, DeepSeek-V3.2): an indexer in every layer, as SGLang 0.5.10 builds
    # it where the config sets no index_topk_freq / index_topk_pattern (models/deepseek_v2.py)
    if c.integer("index_topk_freq", default=1) != 1 or c.has("index_topk_pattern"):
        key = "index_topk_pattern" if c.has("index_topk_pattern") else "index_topk_freq"
        raise c.error(key, "indexers shared across layers are not modelled (expected one in every layer)")
    dsa = DsaAttention(
        **mla,
        index_heads=c.integer("index_n_heads"),
        index_head_dim=c.integer("index_head_dim"),
        index_topk=c.integer("index_topk"),
    )
    return dsa, layer_attention


# Qwen3.5's and Qwen3-Next's layer_types (transformers' Qwen3NextConfig / Qwen3_5TextConfig)
_GDN_LAYER_TYPES = {"linear_attention": LayerAttention.linear, "full_attention": LayerAttention.full}


def _gdn_attention(c: _Config, layers: int, heads: int, kv_heads: int) -> tuple[GdnAttention, Layers]:
    """Gated DeltaNet linear attention with gated GQA every full_attention_interval layers: layer_types where
    the config lists them, else every interval-th layer full (transformers' Qwen3NextConfig default)."""
    types = c.list_of("layer_types", str)
    if types:
        if len(types) < layers:
            raise c.error("layer_types", f"{len(types)} entries for {layers} layers")
        unknown = sorted(set(types[:layers]) - set(_GDN_LAYER_TYPES))
        if unknown:
            raise c.error(
                "layer_types", f"unknown {unknown[0]!r}; expected linear_attention or full_attention"
            )
        kinds = tuple(_GDN_LAYER_TYPES[t] for t in types[:layers])
    else:
        every = c.integer("full_attention_interval", default=4, maximum=layers)
        kinds = tuple(
            LayerAttention.full if (i + 1) % every == 0 else LayerAttention.linear for i in range(layers)
        )
    key, state = c.find("mamba_ssm_dtype")
    if state is not None and state not in STATE_DTYPES:
        raise c.error(key, f"expected one of {', '.join(STATE_DTYPES)}, got {_describe(state)}")
    output_gate = c.flag("attn_output_gate") if "attn_output_gate" in c.cfg else True
    attention = GdnAttention(
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=c.integer("head_dim"),
        output_gate=output_gate,
        linear_key_heads=c.integer("linear_num_key_heads"),
        linear_value_heads=c.integer("linear_num_value_heads"),
        linear_key_dim=c.integer("linear_key_head_dim"),
        linear_value_dim=c.integer("linear_value_head_dim"),
        conv_kernel=c.integer("linear_conv_kernel_dim", default=4),
        state_dtype=STATE_DTYPES[state] if state is not None else Dtype.fp32,
    )
    return attention, kinds


def _gqa_attention(
    c: _Config, layers: int, hidden: int, heads: int, kv_heads: int
) -> tuple[GqaAttention, Layers]:
    head_dim = c.opt_integer("head_dim")
    if head_dim is None:  # the model's width split over its heads, as Hugging Face derives it
        if hidden % heads:
            raise c.error("hidden_size", f"{hidden} does not divide over {heads} heads (and no head_dim)")
        head_dim = hidden // heads
    types = c.list_of("layer_types", str)
    if types:
        if len(types) < layers:
            raise c.error("layer_types", f"{len(types)} entries for {layers} layers")
        kinds = tuple(
            LayerAttention.sliding if "sliding" in t else LayerAttention.full for t in types[:layers]
        )
    else:
        kinds = (LayerAttention.full,) * layers
    window = c.opt_integer("sliding_window") if LayerAttention.sliding in kinds else None
    attention = GqaAttention(num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, sliding_window=window)
    return attention, kinds


def _moe(c: _Config, layers: int, inter: int | None) -> MoE | None:
    names = ("n_routed_experts", "num_experts", "num_local_experts")
    experts = c.integer(*names, default=0, minimum=0)
    if not experts:
        return None
    topk_key = c.find("num_experts_per_tok", "experts_per_token")[0]
    topk = c.integer("num_experts_per_tok", "experts_per_token")
    if topk > experts:
        raise c.error(
            topk_key, f"{topk} experts per token exceeds the {experts} experts ({c.find(*names)[0]})"
        )
    first_dense = c.integer("first_k_dense_replace", default=0, minimum=0, maximum=layers)
    step = c.integer("decoder_sparse_step", "moe_layer_freq", default=1, maximum=layers)
    dense_only = set(c.list_of("mlp_only_layers", int) or [])
    moe_inter = c.opt_integer("moe_intermediate_size")
    if moe_inter is None:
        moe_inter = inter
    if moe_inter is None:
        raise ServelabError(f"{c.where}: MoE model without moe_intermediate_size")
    shared = c.integer("n_shared_experts", default=0, minimum=0)
    shared_width = c.opt_integer("shared_expert_intermediate_size")
    if shared_width is not None and not shared:
        # Qwen's MoE names one shared expert by its width (Qwen3-Next, Qwen3.5): counted in experts of the
        # routed width, which the step graph and the parameter counts take
        if shared_width % moe_inter:
            raise c.error(
                "shared_expert_intermediate_size",
                f"{shared_width} is not a multiple of the experts' width {moe_inter}",
            )
        shared = shared_width // moe_inter
    return MoE(
        num_experts=experts,
        experts_per_token=topk,
        num_shared_experts=shared,
        intermediate_size=moe_inter,
        layers=tuple(i >= first_dense and (i + 1) % step == 0 and i not in dense_only for i in range(layers)),
        num_hash_layers=c.integer("num_hash_layers", default=0, minimum=0, maximum=layers),
    )
