"""One measurement written twice counts once: a database dump names InferenceX's DeepSeek-R1 runs DeepSeek-V3
(R1's architecture), and a CSV export writes the same values with other float rounding."""

from servelab.calibrate.rows import build_cases


def _row(i: int, checkpoint: str, ttft: str, tpot: str) -> dict:
    return {
        "id": f"row{i}",
        "silicon_data_source": "test; silicon_concurrency=4",
        "backend": "sglang",
        "backend_version": "0.5.9",
        "model_path": checkpoint,
        "system": "h200_sxm",
        "mode": "agg",
        "isl": "1024",
        "osl": "1024",
        "gemm_quant_mode": "fp8_block",
        "moe_quant_mode": "fp8_block",
        "batch_size": "4",
        "tp_size": "8",
        "pp_size": "1",
        "attention_dp_size": "1",
        "moe_tp_size": "8",
        "moe_ep_size": "1",
        "silicon_ttft_ms": ttft,
        "silicon_tpot_ms": tpot,
    }


def test_a_measurement_under_two_names_of_one_architecture_counts_once():
    rows = [
        _row(0, "deepseek-ai/DeepSeek-R1", "260.123456789", "13.8"),
        _row(1, "deepseek-ai/DeepSeek-V3", "260.1234568", "13.800000001"),  # the same run, renamed, rounded
        _row(2, "deepseek-ai/DeepSeek-V3", "251.0", "13.8"),  # another measurement
    ]
    cases, skipped = build_cases(rows, "h200_sxm")
    assert [c.row_id for c in cases] == ["row0", "row2"]
    assert sum(n for why, n in skipped.items() if why.startswith("duplicate")) == 1
