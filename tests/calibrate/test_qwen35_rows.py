"""AIConfigurator's Qwen3.5 rows (model_path Qwen/Qwen3.5-397B-A17B, whatever precision ran) read as the
release InferenceX served at the row's precision, with the recipe of their date: its FP8 KV cache and its
bfloat16 linear-attention state (--mamba-ssm-dtype)."""

import pytest

from servelab.calibrate.price import Pricer
from servelab.calibrate.recipes import Load, run_settings
from servelab.calibrate.rows import model_of, to_case
from servelab.engines import Engine
from servelab.specs import Dtype, load_system


def _row(system: str, gemm: str, precision: str, measured: str) -> dict:
    return {
        "id": f"qwen3_5_{system}_{precision}",
        "silicon_data_source": f"source_file=2026-04-06.csv; silicon_concurrency=16; measured={measured}; "
        "image=lmsysorg/sglang:v0.5.9-cu130",
        "backend": "sglang",
        "backend_version": "0.5.9",
        "model_path": "Qwen/Qwen3.5-397B-A17B",
        "system": system,
        "precision": precision,
        "mode": "agg",
        "isl": "8192",
        "osl": "1024",
        "gemm_quant_mode": gemm,
        "moe_quant_mode": "fp8_block" if gemm == "fp8" else gemm,
        "batch_size": "16",
        "tp_size": "8",
        "pp_size": "1",
        "attention_dp_size": "1",
        "moe_tp_size": "8",
        "moe_ep_size": "1",
        "silicon_ttft_ms": "1000",
        "silicon_tpot_ms": "20",
    }


@pytest.mark.parametrize(
    ("gemm", "precision", "source", "weights", "experts"),
    [
        ("", "bf16", "Qwen/Qwen3.5-397B-A17B", Dtype.bf16, Dtype.bf16),
        ("fp8", "fp8", "Qwen/Qwen3.5-397B-A17B-FP8", Dtype.fp8_block, Dtype.fp8_block),
        ("nvfp4", "fp4", "nvidia/Qwen3.5-397B-A17B-NVFP4", Dtype.bf16, Dtype.nvfp4),
    ],
)
def test_a_row_reads_as_the_release_its_precision_ran(gemm, precision, source, weights, experts):
    model = model_of(_row("b300_sxm", gemm, precision, "2026-04-18T00:00:00Z"))
    assert model.name == "qwen3.5-397b-a17b" and model.source == source
    assert (model.precision.weights, model.precision.experts) == (weights, experts)


def test_the_fp8_recipe_sets_an_fp8_cache_and_a_bf16_state():
    """InferenceX's qwen3.5_fp8_b200.sh of 2026-03 (6a5dad463): --kv-cache-dtype fp8_e4m3,
    --mamba-ssm-dtype bfloat16, 32,768-token chunks, 128 running requests at most."""
    load = Load(tp=8, dp_attn=False, concurrency=16, isl=8192, osl=1024)
    s = run_settings(Engine.SGLANG, "qwen3.5-397b-a17b", "b200_sxm", "2026-03-25", load, "fp8")
    assert s is not None and "qwen3.5_fp8_b200.sh" in s.recipe
    assert (s.kv_cache_dtype, s.state_dtype, s.max_num_batched_tokens, s.max_num_seqs) == (
        Dtype.fp8,
        Dtype.bf16,
        32768,
        128,
    )
    # the bf16 scripts leave both to SGLang: the config's float32 state, a BF16 cache
    bf16 = run_settings(Engine.SGLANG, "qwen3.5-397b-a17b", "b200_sxm", "2026-03-25", load, "bf16")
    assert bf16 is not None and bf16.kv_cache_dtype is None and bf16.state_dtype is None


def test_the_priced_model_keeps_the_state_the_recipe_set():
    """The twin prices the row's model with half the state bytes a sequence: bf16 against the config's
    float32 (45 layers x 8 value heads x 128 x 128 a rank at TP 8)."""
    case = to_case(_row("b200_sxm", "fp8", "fp8", "2026-03-25T00:00:00Z"))
    assert case.settings is not None and case.settings.state_dtype == Dtype.bf16
    model, *_ = Pricer(load_system("b200_sxm"), "aggregated")._setup(case, {})
    assert model.attention.state_dtype == Dtype.bf16 and model.precision.kv_cache == Dtype.fp8
    assert (
        case.model.state_bytes_per_sequence(8) - model.state_bytes_per_sequence(8) == 45 * 8 * 128 * 128 * 2
    )
