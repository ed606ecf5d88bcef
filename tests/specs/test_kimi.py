"""Kimi-K2.5: a multimodal config whose language model is DeepSeek-V3's architecture, in Moonshot's INT4
weight-only release and NVIDIA's NVFP4 one. Read from AIConfigurator's pinned copies of the checkpoints'
config.json (tests/data/aic_model_configs/UPSTREAM.md) as `servelab estimate` reads a checkpoint folder."""

import json
import os
from pathlib import Path

import pytest
from clirun import servelab

from servelab.calibrate.rows import model_of
from servelab.errors import ServelabError
from servelab.perfdb.keys import Moe
from servelab.perfdb.roofline import Roofline
from servelab.specs import Dtype, MlaAttention, list_models, load_model, load_system

PINNED = Path(__file__).parents[1] / "data" / "aic_model_configs"
INT4, NVFP4 = PINNED / "Kimi-K2.5", PINNED / "Kimi-K2.5-NVFP4"
ATTENTION_OPS = {"qkv_a_proj", "q_b_proj", "kv_b_proj", "o_proj"}


@pytest.mark.parametrize("folder", [INT4, NVFP4], ids=["int4", "nvfp4"])
def test_the_pinned_configs_give_the_text_models_shapes(folder):
    m = load_model(str(folder))
    assert m.architecture == "DeepseekV3ForCausalLM"  # the text config's: the vision tower is not priced
    assert (m.num_layers, m.hidden_size, m.vocab_size, m.max_context) == (61, 7168, 163840, 262144)
    att = m.attention
    assert isinstance(att, MlaAttention)
    assert (att.num_heads, att.q_lora_rank, att.kv_lora_rank) == (64, 1536, 512)
    assert (att.qk_nope_head_dim, att.qk_rope_head_dim, att.v_head_dim) == (128, 64, 128)
    moe = m.moe
    assert moe is not None
    assert (moe.num_experts, moe.experts_per_token, moe.num_shared_experts) == (384, 8, 1)
    assert moe.intermediate_size == 2048 and m.intermediate_size == 18432
    assert moe.layers == (False,) + (True,) * 60  # first_k_dense_replace 1
    assert m.mtp is None


def test_moonshots_release_has_int4_experts_and_everything_else_in_bf16():
    m = load_model(str(INT4))
    p = m.precision
    assert (p.experts, p.weights, p.kv_cache) == (Dtype.int4, Dtype.bf16, Dtype.bf16)
    # the routed experts at 4 bits and a bf16 scale per 32 values, the rest at 2 bytes a parameter
    routed = 61 - 1
    expert_params = routed * 384 * 3 * 7168 * 2048
    bf16 = load_model(str(INT4), expert_dtype="bf16")
    assert bf16.weight_bytes - m.weight_bytes == pytest.approx(expert_params * (2 - 0.5625), rel=1e-9)


def test_nvidias_release_is_nvfp4_with_fp8_kv_and_bf16_attention():
    m = load_model(str(NVFP4))
    p = m.precision
    assert (p.experts, p.weights, p.kv_cache) == (Dtype.nvfp4, Dtype.nvfp4, Dtype.fp8)
    assert ATTENTION_OPS <= set(p.unquantized)


def test_the_embedded_model_and_its_checkpoints_match_the_pinned_configs():
    assert "kimi-k2.5" in list_models()
    for checkpoint, folder in (("moonshotai/Kimi-K2.5", INT4), ("nvidia/Kimi-K2.5-NVFP4", NVFP4)):
        embedded, pinned = load_model(checkpoint), load_model(str(folder))
        assert embedded.name == "kimi-k2.5" and embedded.source == checkpoint
        assert embedded.model_dump(exclude={"name", "source"}) == pinned.model_dump(
            exclude={"name", "source"}
        )


def test_the_rows_read_int4_wo_as_the_native_release_and_nvfp4_as_nvidias():
    int4 = model_of({"model_path": "moonshotai/Kimi-K2.5", "gemm_quant_mode": "int4_wo"})
    assert int4.precision.experts == Dtype.int4 and int4.precision.weights == Dtype.bf16
    fp4 = model_of(
        {"model_path": "moonshotai/Kimi-K2.5", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4"}
    )
    assert fp4.precision == load_model("nvidia/Kimi-K2.5-NVFP4").precision
    with pytest.raises(ValueError, match="no INT4 weight-only experts"):
        model_of({"model_path": "deepseek-ai/DeepSeek-V3", "gemm_quant_mode": "int4_wo"})


def test_int4_experts_are_priced_at_the_bf16_rate_with_a_quarter_of_the_weight_bytes():
    # the weights' bytes alone (torch's roofline: no engine kernel's read rate, tests/perfdb/
    # test_roofline_int4_experts.py has vLLM's and SGLang's)
    roof = Roofline(load_system("h200_sxm"), backend="torch")
    # a decode step of 64 tokens on one rank: memory bound, 0.5625 of 2 bytes a weight (and launch floors)
    decode = {d: roof.latency(Moe(64, 7168, 256, 384, 8, 1, d)).us for d in ("int4", "bf16")}
    assert decode["int4"] < 0.35 * decode["bf16"]
    prefill = {d: roof.latency(Moe(16384, 7168, 256, 384, 8, 1, d)).us for d in ("int4", "bf16")}
    assert prefill["int4"] == pytest.approx(prefill["bf16"], rel=0.05)  # compute bound: bf16 activations
    vllm = Roofline(load_system("h200_sxm"), backend="vllm")
    assert vllm.latency(Moe(16384, 7168, 256, 384, 8, 1, "int4")).us == pytest.approx(prefill["int4"])


def test_estimate_answers_offline_and_says_what_is_roofline():
    r = servelab(
        "estimate", "moonshotai/Kimi-K2.5", "--system", "h200_sxm", "--tp", "8", "--batch", "16",
        "--backend", "vllm", "--json",
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["model"] == "kimi-k2.5" and data["ttft_ms"] > 0 and data["tpot_ms"] > 0
    # no table times INT4 experts: they are the roofline's
    assert data["provenance"]["kernel_time_by_source"]["roofline"] > 0


def _config(quant: dict) -> dict:
    text = json.loads((INT4 / "config.json").read_text())["text_config"]
    return {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": {**text, **quant}}


@pytest.mark.parametrize(
    "cfg, needle",
    [
        (
            {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": [1]},
            "text_config: expected a JSON object, got a list",
        ),
        (
            {"text_config": {"hidden_size": 7168}},
            "text_config: missing field 'num_hidden_layers'",
        ),
    ],
)
def test_a_broken_text_config_is_one_line(tmp_path, cfg, needle):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ServelabError, match=needle):
        load_model(str(tmp_path))


def test_int4_of_another_group_size_is_refused_not_priced_as_kimis(tmp_path):
    quant = json.loads((INT4 / "config.json").read_text())["text_config"]["quantization_config"]
    quant["config_groups"]["group_0"]["weights"]["group_size"] = 128
    (tmp_path / "config.json").write_text(json.dumps(_config({"quantization_config": quant})))
    r = servelab("estimate", str(tmp_path), "--system", "h200_sxm", "--tp", "8")
    assert r.returncode == 2
    assert "config_groups.group_0.weights: INT4 weights with group_size 128" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
