"""Reading AIConfigurator's silicon rows: one measurement written twice counts once (a database dump names
InferenceX's DeepSeek-R1 runs DeepSeek-V3, R1's architecture, and a CSV export writes the same values with
other float rounding); the KV-cache dtype the file does not mark."""

from silicon_csv import silicon_row

from servelab.calibrate.rows import ENGINES, build_cases, to_case
from servelab.specs import Dtype


def _row(i: int, checkpoint: str, ttft: str, tpot: str, engine: str = "sglang") -> dict:
    return silicon_row(i, engine, checkpoint, ttft, tpot, "0.5.9")


def test_a_measurement_under_two_names_of_one_architecture_counts_once():
    rows = [
        _row(0, "deepseek-ai/DeepSeek-R1", "260.123456789", "13.8"),
        _row(1, "deepseek-ai/DeepSeek-V3", "260.1234568", "13.800000001"),  # the same run, renamed, rounded
        _row(2, "deepseek-ai/DeepSeek-V3", "251.0", "13.8"),  # another measurement
    ]
    cases, skipped = build_cases(rows, "h200_sxm")
    assert [c.row_id for c in cases] == ["row0", "row2"]
    assert sum(n for why, n in skipped.items() if why.startswith("duplicate")) == 1


def test_tensorrt_llm_fp8_rows_ran_an_fp8_kv_cache_the_others_bf16():
    kv = {
        e: to_case(_row(0, "deepseek-ai/DeepSeek-R1", "1", "1", e)).model.precision.kv_cache for e in ENGINES
    }
    assert kv == {"vllm": Dtype.bf16, "sglang": Dtype.bf16, "trtllm": Dtype.fp8}
    bf16_row = dict(
        _row(0, "meta-llama/Llama-3.1-70B", "1", "1", "trtllm"), precision="bf16", gemm_quant_mode="bf16"
    )
    bf16_row.update(moe_tp_size="1", tp_size="1")
    assert to_case(bf16_row).model.precision.kv_cache == Dtype.bf16


def test_a_checkpoint_that_declares_an_fp8_kv_cache_runs_one_on_every_engine():
    def kv(engine: str, checkpoint: str):
        row = dict(_row(0, checkpoint, "1", "1", engine), gemm_quant_mode="fp8", moe_tp_size="1", tp_size="1")
        return to_case(row).model.precision.kv_cache

    # nvidia's ModelOpt checkpoint declares kv_cache_quant_algo FP8; meta-llama's, quantized online, does not
    declared = {e: kv(e, "nvidia/Llama-3.1-8B-Instruct-FP8") for e in ENGINES}
    assert declared == dict.fromkeys(ENGINES, Dtype.fp8)
    assert kv("vllm", "meta-llama/Llama-3.1-8B-Instruct") == Dtype.bf16


def test_a_row_whose_layout_does_not_validate_is_left_out_with_a_one_line_reason():
    row = dict(_row(0, "meta-llama/Llama-3.1-70B", "1", "1", "vllm"), tp_size="0", moe_tp_size="0")
    cases, skipped = build_cases([row], "h200_sxm")
    assert cases == []
    (reason,) = skipped
    assert "\n" not in reason and "tp" in reason and "greater than or equal to 1" in reason, reason
