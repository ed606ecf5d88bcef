"""Model specs against the sizes and cache formulas their publishers state."""

import json

import pytest

from servelab.errors import ServelabError
from servelab.specs import (
    Dsv4Attention,
    Dtype,
    GqaAttention,
    LayerAttention,
    MlaAttention,
    ModelSpec,
    list_models,
    load_model,
)

# (total, active) as the publishers state them
STATED = {
    "deepseek-v4-pro": (1.6e12, 49e9),
    "deepseek-v4-flash": (284e9, 13e9),
    "deepseek-v3": (671e9, 37e9),
    "deepseek-r1": (671e9, 37e9),
    "qwen3-32b": (32.8e9, 32.8e9),
    "qwen3-30b-a3b": (30.5e9, 3.3e9),
    "qwen3-235b-a22b": (235e9, 22e9),
    "llama-3.1-8b": (8.03e9, None),
    "llama-3.1-70b": (70.6e9, None),
    "gpt-oss-120b": (116.8e9, 5.13e9),
    # Kimi-K2's technical report (arXiv 2507.20534): 1.04T total, 32B activated; K2.5's text model is K2's
    "kimi-k2.5": (1.04e12, 32e9),
    "glm-5": (744e9, None),  # "40B active", two figures: tests/specs/test_glm5.py checks it within 3 %
    "qwen3.5-397b-a17b": (397e9, None),  # "A17B", two figures: tests/specs/test_qwen35.py checks it
}


def test_every_embedded_model_is_listed():
    assert sorted(STATED) == list_models()


@pytest.mark.parametrize("name", sorted(STATED))
def test_parameter_counts_within_two_percent(name):
    m = load_model(name)
    total, active = STATED[name]
    assert abs(m.total_params / total - 1) < 0.02
    if active:
        assert abs(m.active_params / active - 1) < 0.02


def test_dsv4_kv_bytes_per_token_match_the_formulas():
    pro, flash = load_model("deepseek-v4-pro"), load_model("deepseek-v4-flash")
    assert pro.kv_bytes_per_token == pytest.approx(5511, abs=1)
    assert flash.kv_bytes_per_token == pytest.approx(3850, abs=1)
    pro4 = load_model("deepseek-v4-pro", indexer_dtype="fp4")
    flash4 = load_model("deepseek-v4-flash", indexer_dtype="fp4")
    assert pro4.kv_bytes_per_token == pytest.approx(5031, abs=1)
    assert flash4.kv_bytes_per_token == pytest.approx(3514, abs=1)


def test_dsv4_layer_kinds_and_window_constant():
    pro, flash = load_model("deepseek-v4-pro"), load_model("deepseek-v4-flash")
    assert (pro.count_layers(LayerAttention.csa), pro.count_layers(LayerAttention.hca)) == (30, 31)
    assert flash.count_layers(LayerAttention.sliding) == 2
    assert (flash.count_layers(LayerAttention.csa), flash.count_layers(LayerAttention.hca)) == (21, 20)
    # 128 tokens: full windows, 32 compressed CSA entries (with indexer) and one HCA entry per layer
    window_only = sum(pro.kv_bytes_per_layer(k, 128) for k in pro.layer_attention)
    assert window_only == pytest.approx(61 * 128 * 584 + 30 * 32 * (584 + 132) + 31 * 1 * 584, rel=1e-9)
    one_m = pro.kv_bytes_per_sequence(1 << 20) / (1 << 30)
    assert 5.2 < one_m < 5.5  # about 5.4 GiB per 1M-token sequence


def test_mla_and_gqa_kv_bytes():
    v3 = load_model("deepseek-v3")
    assert v3.kv_bytes_per_token == 61 * 1152
    assert load_model("deepseek-v3", kv_dtype="fp8").kv_bytes_per_token == 61 * 656
    llama = load_model("llama-3.1-70b")
    assert llama.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2
    # tp 16 > 8 KV heads: each rank still holds one head
    assert llama.kv_bytes_per_token_asymptotic(kv_heads_local=1) == 2 * 80 * 1 * 128 * 2


def test_gpt_oss_sliding_layers_do_not_grow():
    m = load_model("gpt-oss-120b")
    assert m.count_layers(LayerAttention.sliding) == 18
    assert m.kv_bytes_per_token == 2 * 18 * 8 * 64 * 2
    assert m.precision.experts == Dtype.mxfp4 and m.precision.weights == Dtype.bf16


def test_checkpoint_ids_set_precision():
    native = load_model("deepseek-ai/DeepSeek-V4-Pro")
    assert native.precision.experts == Dtype.fp4 and native.precision.weights == Dtype.fp8_block
    assert load_model("sgl-project/DeepSeek-V4-Pro-FP8").precision.experts == Dtype.fp8_block
    assert load_model("nvidia/DeepSeek-V4-Pro-NVFP4").precision.experts == Dtype.nvfp4
    assert load_model("deepseek-ai/DeepSeek-V4-Flash-0731").name == "deepseek-v4-flash"
    assert load_model("llama-3.1-70b", weight_dtype="fp8").precision.weights == Dtype.fp8


def test_fp8_weights_halve_weight_bytes():
    bf16, fp8 = load_model("qwen3-32b"), load_model("qwen3-32b", weight_dtype="fp8")
    embed = (bf16.params.embedding + bf16.params.lm_head) * 2
    assert fp8.weight_bytes - embed == pytest.approx((bf16.weight_bytes - embed) / 2, rel=1e-6)


def test_config_json_path_and_errors(tmp_path):
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 2,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = load_model(str(tmp_path))
    assert m.num_layers == 2 and m.attention.head_dim == 64 and m.attention.kind.value == "gqa"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    with pytest.raises(ServelabError, match="not valid JSON"):
        load_model(str(bad))
    (bad / "config.json").write_text(json.dumps({"hidden_size": 128}))
    with pytest.raises(ServelabError, match="missing field 'num_hidden_layers'"):
        load_model(str(bad))
    moe = {**cfg, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64}
    del moe["intermediate_size"]
    (bad / "config.json").write_text(json.dumps({**moe, "first_k_dense_replace": 1}))
    with pytest.raises(ServelabError, match="missing field 'intermediate_size'"):  # its first layer is dense
        load_model(str(bad))
    (bad / "config.json").write_text(json.dumps(moe))
    assert load_model(str(bad)).params.dense_ffn == 0
    with pytest.raises(ServelabError, match="did you mean deepseek-v4-flash"):
        load_model("deepseek-v4-flsh")
    with pytest.raises(ServelabError, match="kv_dtype: unknown dtype 'int3'") as bad_dtype:
        load_model("qwen3-32b", kv_dtype="int3")
    assert bad_dtype.value.flag_message().startswith(
        "--kv-dtype: "
    )  # the library names the field, the CLI its flag


def test_models_are_composed_of_their_parts():
    flash, v3, llama = load_model("deepseek-v4-flash"), load_model("deepseek-v3"), load_model("llama-3.1-8b")
    assert isinstance(flash.attention, Dsv4Attention) and flash.attention.sliding_window == 128
    assert flash.moe is not None and (flash.moe.num_experts, flash.moe.num_hash_layers) == (256, 3)
    assert flash.mtp is not None and flash.mtp.num_layers == 1
    assert flash.hyper_connections is not None and flash.hyper_connections.mult == 4
    assert isinstance(v3.attention, MlaAttention) and v3.attention.q_head_dim == 192
    assert v3.moe is not None and v3.num_dense_layers == 3 and v3.hyper_connections is None
    assert isinstance(llama.attention, GqaAttention) and llama.attention.sliding_window is None
    assert (llama.moe, llama.mtp, llama.hyper_connections) == (None, None, None)
    # layers grouped by (attention kind, MoE, hash-routed), once per model
    groups = dict(flash.layer_groups)
    assert sum(groups.values()) == 43 and groups[(LayerAttention.sliding, True, True)] == 2
    assert flash.layer_groups is flash.layer_groups


@pytest.mark.parametrize("name", sorted(STATED))
def test_model_spec_round_trips_through_json(name):
    m = load_model(name)
    back = ModelSpec.model_validate_json(m.model_dump_json())
    assert back == m and type(back.attention) is type(m.attention)
    assert back.summary() == m.summary()
