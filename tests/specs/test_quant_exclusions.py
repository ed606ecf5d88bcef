"""NVIDIA's NVFP4 DeepSeek checkpoints keep the MLA projections out of NVFP4 (their quantization config's
exclude_modules), and the engines run those projections unquantized, in BF16: the twin prices them so."""

import json
from pathlib import Path

import pytest

from servelab.calibrate.rows import model_of
from servelab.errors import ServelabError
from servelab.perfdb.keys import Gemm
from servelab.predict.graph import StepShape, step_ops
from servelab.predict.memory import weight_bytes_per_gpu
from servelab.specs import Dtype, Parallel, load_model
from servelab.specs.quant_exclusions import unquantized_ops

# AIConfigurator's copy of the checkpoint's config.json and hf_quant_config.json (its UPSTREAM.md)
V31_NVFP4 = Path(__file__).parents[1] / "data" / "aic_model_configs" / "DeepSeek-V3.1-NVFP4"
MLA_PROJECTIONS = {"qkv_a_proj", "q_b_proj", "kv_b_proj"}
# a decode step and a prefill chunk: kv_b_proj runs only on prefill tokens (decode absorbs it)
SPLIT = Parallel(tp=8, ep=8)
BF16_ALWAYS = {"router", "lm_head"}
SHAPES = (StepShape(decode_batch=8, decode_kv_len=2000), StepShape(prefill=((1024, 0),)))


def gemm_dtypes(model) -> dict[str, str]:
    """The layers' dense GEMMs in a decode step and a prefill chunk, by op name, and the format each is priced
    in (the router and the LM head are BF16 in every checkpoint)."""
    ops = (op for shape in SHAPES for op in step_ops(model, SPLIT, shape))
    return {op.name: op.key.dtype for op in ops if isinstance(op.key, Gemm) and op.name not in BF16_ALWAYS}


def test_the_v31_release_prices_its_excluded_projections_in_bf16_and_o_proj_in_nvfp4():
    model = load_model(str(V31_NVFP4))
    assert (model.precision.weights, model.precision.experts) == (Dtype.nvfp4, Dtype.nvfp4)
    assert set(model.precision.unquantized) == MLA_PROJECTIONS
    dtypes = gemm_dtypes(model)
    assert {name: dtypes[name] for name in MLA_PROJECTIONS} == dict.fromkeys(MLA_PROJECTIONS, "bf16")
    assert dtypes["o_proj"] == "nvfp4"  # not in exclude_modules: quantized like the rest
    assert dtypes["shared_gate_up"] == "nvfp4"


def test_an_embedded_nvfp4_deepseek_release_and_the_rows_that_ran_it_price_the_whole_attention_in_bf16():
    for model in (
        load_model("nvidia/DeepSeek-R1-0528-FP4"),
        model_of(
            {"model_path": "deepseek-ai/DeepSeek-V3", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4"}
        ),
        model_of(
            {"model_path": "deepseek-ai/DeepSeek-R1", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4"}
        ),
    ):
        dtypes = gemm_dtypes(model)
        assert {dtypes[name] for name in (*MLA_PROJECTIONS, "o_proj")} == {"bf16"}, model.name
        assert dtypes["shared_down"] == "nvfp4" and model.precision.experts == Dtype.nvfp4


def test_a_checkpoint_that_excludes_nothing_prices_every_projection_in_its_format():
    for model in (load_model("deepseek-v3", weight_dtype="nvfp4"), load_model("deepseek-ai/DeepSeek-R1")):
        assert model.precision.unquantized == ()
        dtypes = gemm_dtypes(model)
        absorbed = {"mla_q_absorb", "mla_v_absorb"}  # per-head BMMs, BF16 in every checkpoint
        assert {dtypes[name] for name in dtypes.keys() - absorbed} == {model.precision.weights.value}


def test_the_unquantized_projections_are_stored_in_bf16():
    quantized = load_model("deepseek-r1", weight_dtype="nvfp4", kv_dtype="fp8")
    released = load_model("nvidia/DeepSeek-R1-0528-FP4")
    params = released.unquantized_attention_params
    assert params == released.params.attention  # the whole block, o_proj included
    extra = params * (Dtype.bf16.bytes - Dtype.nvfp4.bytes)
    assert released.weight_bytes - quantized.weight_bytes == pytest.approx(extra)
    more = weight_bytes_per_gpu(released, SPLIT) - weight_bytes_per_gpu(quantized, SPLIT)
    assert more == pytest.approx(extra / 8)


WHOLE_BLOCK = {
    "qkv_a_proj",
    "q_b_proj",
    "kv_b_proj",
    "o_proj",
    "qkv_proj",
    "indexer_q_proj",
    "indexer_k_proj",
}


@pytest.mark.parametrize(
    ("patterns", "ops"),
    [
        (["model.layers.0.self_attn*"], WHOLE_BLOCK),
        (["re:.*self_attn.*"], WHOLE_BLOCK),
        (["model.layers.3.self_attn.q_b_proj", "lm_head", "model.layers.61*"], {"q_b_proj"}),
        # the fused down-projection stays quantized unless both of its modules are excluded
        (["model.layers.3.self_attn.q_a_proj"], set()),
        (
            ["model.layers.3.self_attn.q_a_proj", "model.layers.3.self_attn.kv_a_proj_with_mqa"],
            {"qkv_a_proj"},
        ),
        # DSA's indexer (GLM-5, DeepSeek-V3.2): its query and key projections
        (["model.layers.3.self_attn.indexer*", "lm_head"], {"indexer_q_proj", "indexer_k_proj"}),
    ],
)
def test_exclusion_patterns_name_the_graphs_ops(patterns, ops):
    assert set(unquantized_ops(patterns)) == ops


def test_malformed_exclusions_name_the_field(tmp_path):
    config = json.loads((V31_NVFP4 / "config.json").read_text())
    quant = json.loads((V31_NVFP4 / "hf_quant_config.json").read_text())
    quant["quantization"]["exclude_modules"] = "self_attn"
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(quant))
    with pytest.raises(ServelabError, match="exclude_modules: expected a list of module names"):
        load_model(str(tmp_path))
