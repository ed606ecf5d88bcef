"""The KV-cache format a checkpoint declares is the one every engine runs by default (`--kv-cache-dtype auto`:
vLLM 0.25 resolve_kv_cache_dtype_string, SGLang 0.5.23 configure_kv_cache_dtype), never an assumed bf16."""

import json

import pytest

from servelab.calibrate.rows import model_of
from servelab.specs import ENGINE_KV_CACHE_DTYPES, Dtype, load_model
from servelab.specs.hf_config import model_from_hf_config

LLAMA_70B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
}
# NVIDIA's FP8 release of it, as its hf_quant_config.json writes it (AIConfigurator bundles the file:
# model_configs/nvidia--Llama-3.1-70B-Instruct-FP8_hf_quant_config.json)
MODELOPT_FP8 = {
    "producer": {"name": "modelopt"},
    "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"},
}


def test_a_modelopt_config_that_declares_an_fp8_kv_cache_gets_one():
    declared = {
        **LLAMA_70B,
        "quantization_config": {"quant_method": "modelopt", **MODELOPT_FP8["quantization"]},
    }
    assert model_from_hf_config(declared, "x", "x").precision.kv_cache == Dtype.fp8
    scheme = {
        "quant_method": "modelopt",
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "dynamic": False},
    }
    assert (
        model_from_hf_config({**LLAMA_70B, "quantization_config": scheme}, "x", "x").precision.kv_cache
        == Dtype.fp8
    )
    # only ModelOpt's declaration counts (vLLM reads it only for quant_method modelopt*), and only FP8
    other = {"quant_method": "fp8", "kv_cache_quant_algo": "FP8"}
    assert (
        model_from_hf_config({**LLAMA_70B, "quantization_config": other}, "x", "x").precision.kv_cache
        == Dtype.bf16
    )
    assert model_from_hf_config(LLAMA_70B, "x", "x").precision.kv_cache == Dtype.bf16


def test_a_checkpoint_folder_with_hf_quant_config_runs_its_declared_formats(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_70B))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(MODELOPT_FP8))
    precision = load_model(str(tmp_path)).precision
    assert (precision.weights, precision.kv_cache) == (Dtype.fp8, Dtype.fp8)
    (tmp_path / "hf_quant_config.json").write_text("[]")
    with pytest.raises(Exception, match="ModelOpt"):
        load_model(str(tmp_path))


def test_an_embedded_checkpoint_id_carries_its_declared_kv_cache_and_a_setting_wins():
    assert load_model("nvidia/Llama-3.1-70B-Instruct-FP8").precision.kv_cache == Dtype.fp8
    assert load_model("meta-llama/Llama-3.1-70B-Instruct").precision.kv_cache == Dtype.bf16
    assert load_model("nvidia/Llama-3.1-70B-Instruct-FP8", kv_dtype="bf16").precision.kv_cache == Dtype.bf16


def test_every_engines_spelling_maps_to_a_format_and_auto_keeps_the_checkpoints():
    assert ENGINE_KV_CACHE_DTYPES["auto"] is None
    assert {ENGINE_KV_CACHE_DTYPES[k] for k in ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")} == {
        Dtype.fp8
    }
    assert ENGINE_KV_CACHE_DTYPES["bfloat16"] == Dtype.bf16


def test_an_nvfp4_silicon_row_runs_nvidias_release_with_its_fp8_kv_cache():
    row = {"model_path": "meta-llama/Llama-3.1-70B", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4"}
    precision = model_of(row).precision
    assert (precision.weights, precision.experts, precision.kv_cache) == (Dtype.nvfp4, Dtype.nvfp4, Dtype.fp8)
    # a checkpoint with FP4 experts of its own keeps them, and its KV cache
    gpt = model_of(
        {"model_path": "openai/gpt-oss-120b", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4"}
    )
    assert gpt.precision == load_model("openai/gpt-oss-120b").precision
