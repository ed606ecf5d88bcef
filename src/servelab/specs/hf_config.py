"""Build a ModelSpec from a Hugging Face config.json (dict), whatever family it describes."""

from functools import partial

from servelab.errors import ServelabError
from servelab.specs.attention import Attention, Dsv4Attention, GqaAttention, LayerAttention, MlaAttention
from servelab.specs.dtypes import Dtype, Precision
from servelab.specs.model import HyperConnections, ModelSpec, MoE, Mtp


def _get(cfg: dict, *names, default=None, required: bool = False, where: str = "config.json"):
    for name in names:
        if cfg.get(name) is not None:
            return cfg[name]
    if required:
        raise ServelabError(f"{where}: missing field {names[0]!r}")
    return default


def _default_precision(cfg: dict, attention: Attention) -> Precision:
    quant = cfg.get("quantization_config") or {}
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
    if quant.get("expert_dtype"):
        experts = Dtype(str(quant["expert_dtype"]).lower())
    return Precision(
        weights=weights,
        experts=experts,
        kv_cache=attention.default_kv_cache,
        indexer_cache=attention.default_indexer_cache,
    )


def model_from_hf_config(cfg: dict, name: str, source: str, where: str = "config.json") -> ModelSpec:
    if not isinstance(cfg, dict):
        raise ServelabError(f"{where}: expected a JSON object")
    try:
        return _build(cfg, name, source, where)
    except (TypeError, ValueError, KeyError, ZeroDivisionError) as e:
        if isinstance(e, ServelabError):
            raise
        raise ServelabError(f"{where}: malformed model config ({type(e).__name__}: {e})") from None


def _build(cfg: dict, name: str, source: str, where: str) -> ModelSpec:
    g = partial(_get, cfg, where=where)
    layers = int(g("num_hidden_layers", "n_layers", "num_layers", required=True))
    hidden = int(g("hidden_size", "d_model", "dim", required=True))
    heads = int(g("num_attention_heads", "n_heads", required=True))
    kv_heads = int(g("num_key_value_heads", "n_kv_heads", default=heads))
    vocab = int(g("vocab_size", required=True))
    if min(layers, hidden, heads, kv_heads, vocab) <= 0:
        raise ServelabError(f"{where}: layer, hidden, head and vocab sizes must be positive")
    attention: GqaAttention | MlaAttention | Dsv4Attention
    hyper = None  # DeepSeek-V4 only
    if g("compress_ratios") is not None:
        attention, layer_attention = _dsv4_attention(g, layers, heads, kv_heads, where)
        hyper = HyperConnections(
            mult=int(g("hc_mult", default=4)), sinkhorn_iters=int(g("hc_sinkhorn_iters", default=20))
        )
    elif g("kv_lora_rank") is not None:
        attention, layer_attention = _mla_attention(g, layers, heads, kv_heads, where)
    else:
        attention, layer_attention = _gqa_attention(g, layers, hidden, heads, kv_heads)
    if heads % kv_heads:
        raise ServelabError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )
    inter = g("intermediate_size")
    moe = _moe(g, layers, inter, where)
    if inter is None and (moe is None or not all(moe.layers)):  # dense FFN layers need their width
        raise ServelabError(f"{where}: missing field 'intermediate_size'")
    mtp_layers = int(g("num_nextn_predict_layers", default=0) or 0)
    return ModelSpec(
        name=name,
        source=source,
        architecture=(g("architectures", default=["unknown"]) or ["unknown"])[0],
        num_layers=layers,
        hidden_size=hidden,
        vocab_size=vocab,
        tie_word_embeddings=bool(g("tie_word_embeddings", default=False)),
        max_context=int(g("max_position_embeddings", "max_seq_len", default=4096)),
        attention=attention,
        layer_attention=layer_attention,
        intermediate_size=int(inter) if inter is not None else None,
        moe=moe,
        mtp=Mtp(num_layers=mtp_layers) if mtp_layers else None,
        hyper_connections=hyper,
        active_counts_embedding=bool((cfg.get("_servelab") or {}).get("active_counts_embedding", False)),
        precision=_default_precision(cfg, attention),
    )


Layers = tuple[LayerAttention, ...]
_DSV4_RATIOS = {0: LayerAttention.sliding, 4: LayerAttention.csa, 128: LayerAttention.hca}


def _dsv4_attention(g, layers: int, heads: int, kv_heads: int, where: str) -> tuple[Dsv4Attention, Layers]:
    ratios = list(g("compress_ratios"))[:layers]
    if len(ratios) != layers:
        raise ServelabError(f"{where}: compress_ratios has {len(ratios)} entries for {layers} layers")
    if any(r not in _DSV4_RATIOS for r in ratios):
        raise ServelabError(f"{where}: compress_ratios entries must be 0, 4 or 128")
    attention = Dsv4Attention(
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=int(g("head_dim", required=True)),
        qk_rope_head_dim=int(g("qk_rope_head_dim", default=64)),
        q_lora_rank=int(g("q_lora_rank", required=True)),
        o_groups=int(g("o_groups", required=True)),
        o_lora_rank=int(g("o_lora_rank", required=True)),
        index_heads=int(g("index_n_heads", default=64)),
        index_head_dim=int(g("index_head_dim", default=128)),
        index_topk=int(g("index_topk", default=1024)),
        sliding_window=int(g("sliding_window", default=128)),
    )
    return attention, tuple(_DSV4_RATIOS[r] for r in ratios)


def _mla_attention(g, layers: int, heads: int, kv_heads: int, where: str) -> tuple[MlaAttention, Layers]:
    q_lora_rank = g("q_lora_rank")
    kv_lora_rank = int(g("kv_lora_rank"))
    nope = int(g("qk_nope_head_dim", required=True))
    rope = int(g("qk_rope_head_dim", required=True))
    v_head_dim = int(g("v_head_dim", required=True))
    if q_lora_rank is None:
        raise ServelabError(f"{where}: MLA without q_lora_rank is not supported")
    attention = MlaAttention(
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=v_head_dim,
        q_lora_rank=int(q_lora_rank),
        kv_lora_rank=kv_lora_rank,
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=v_head_dim,
    )
    return attention, (LayerAttention.full,) * layers


def _gqa_attention(g, layers: int, hidden: int, heads: int, kv_heads: int) -> tuple[GqaAttention, Layers]:
    head_dim = int(g("head_dim", default=hidden // heads))
    types = g("layer_types")
    if types:
        kinds = tuple(
            LayerAttention.sliding if "sliding" in t else LayerAttention.full for t in types[:layers]
        )
    else:
        kinds = (LayerAttention.full,) * layers
    window = g("sliding_window") if LayerAttention.sliding in kinds else None
    attention = GqaAttention(num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, sliding_window=window)
    return attention, kinds


def _moe(g, layers: int, inter, where: str) -> MoE | None:
    experts = int(g("n_routed_experts", "num_experts", "num_local_experts", default=0) or 0)
    if not experts:
        return None
    first_dense = int(g("first_k_dense_replace", default=0))
    step = int(g("decoder_sparse_step", "moe_layer_freq", default=1) or 1)
    dense_only = set(g("mlp_only_layers", default=[]) or [])
    moe_inter = g("moe_intermediate_size", default=inter)
    if moe_inter is None:
        raise ServelabError(f"{where}: MoE model without moe_intermediate_size")
    return MoE(
        num_experts=experts,
        experts_per_token=int(g("num_experts_per_tok", "experts_per_token", required=True)),
        num_shared_experts=int(g("n_shared_experts", default=0) or 0),
        intermediate_size=int(moe_inter),
        layers=tuple(i >= first_dense and (i + 1) % step == 0 and i not in dense_only for i in range(layers)),
        num_hash_layers=int(g("num_hash_layers", default=0) or 0),
    )
