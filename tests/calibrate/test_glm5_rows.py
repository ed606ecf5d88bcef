"""AIConfigurator's GLM-5 rows (model_path zhipuai/GLM-5, a name the hub does not have) read as the
checkpoints InferenceX served them with, with the KV cache SGLang ran and the recipe of their date."""

import pytest

from servelab.calibrate.recipes import Load, run_settings
from servelab.calibrate.rows import model_of, to_case
from servelab.engines import Engine
from servelab.specs import Dtype


def _row(system: str, gemm: str, precision: str, measured: str) -> dict:
    return {
        "id": f"glm5_{system}_{precision}",
        "silicon_data_source": f"model=GLM-5; silicon_concurrency=16; measured={measured}",
        "backend": "sglang",
        "backend_version": "nightly-dev",
        "model_path": "zhipuai/GLM-5",
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
    ("gemm", "source", "weights", "kv"),
    [
        ("fp8", "zai-org/GLM-5-FP8", Dtype.fp8_block, Dtype.bf16),
        ("nvfp4", "nvidia/GLM-5-NVFP4", Dtype.nvfp4, Dtype.fp8),
    ],
)
def test_a_row_reads_as_the_release_its_precision_ran(gemm, source, weights, kv):
    model = model_of(_row("b200_sxm", gemm, "fp4" if gemm == "nvfp4" else "fp8", "2026-03-29T00:00:00Z"))
    assert model.name == "glm-5" and model.source == source
    assert (model.precision.weights, model.precision.kv_cache) == (weights, kv)


def test_sglang_runs_a_dsa_cache_in_fp8_on_blackwell_only():
    """B300's rows had no InferenceX script on their date: SGLang's own default, FP8 on Blackwell, BF16 on
    Hopper (0.5.10 server_args.py _set_default_nsa_kv_cache_dtype)."""
    b300 = to_case(_row("b300_sxm", "fp8", "fp8", "2026-04-03T16:51:02Z"))
    h200 = to_case(_row("h200_sxm", "fp8", "fp8", "2026-03-19T06:26:42Z"))
    assert b300.settings is None and b300.model.precision.kv_cache == Dtype.fp8
    assert h200.model.precision.kv_cache == Dtype.bf16


def test_the_b200_fp8_recipe_sets_its_fp8_cache_and_token_budget():
    """InferenceX's glm5_fp8_b200.sh of 2026-03-20 (13930ca61): --kv-cache-dtype fp8_e4m3, 32,768-token
    chunks, as many running requests as clients."""
    load = Load(tp=8, dp_attn=False, concurrency=16, isl=8192, osl=1024)
    s = run_settings(Engine.SGLANG, "glm-5", "b200_sxm", "2026-03-20", load, "fp8")
    assert s is not None and "glm5_fp8_b200.sh@13930ca61" in s.recipe
    assert (s.kv_cache_dtype, s.max_num_batched_tokens, s.max_num_seqs) == (Dtype.fp8, 32768, 16)
    h200 = run_settings(Engine.SGLANG, "glm-5", "h200_sxm", "2026-03-19", load, "fp8")
    assert h200 is not None and h200.kv_cache_dtype is None and h200.memory_share == 0.85
    assert run_settings(Engine.SGLANG, "glm-5", "b200_sxm", "2026-03-19", load, "fp8") is None
