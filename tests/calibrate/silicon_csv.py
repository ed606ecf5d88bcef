"""One row of AIConfigurator's silicon_sample.csv, as the calibration tests build them: an aggregated FP8
block-quantised H200 run at 4 clients, 1024/1024 tokens, tp 8 (MoE tp 8), with the given engine, model and
measured TTFT / TPOT (strings, as the CSV holds them)."""


def silicon_row(
    i: int,
    engine: str,
    checkpoint: str,
    ttft: str,
    tpot: str,
    version: str,
    source: str = "test; silicon_concurrency=4",
) -> dict:
    return {
        "id": f"row{i}",
        "silicon_data_source": source,
        "backend": engine,
        "precision": "fp8",
        "backend_version": version,
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
