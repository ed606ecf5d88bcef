"""Reading AIConfigurator's silicon rows: one measurement written twice counts once (a database dump names
InferenceX's DeepSeek-R1 runs DeepSeek-V3, R1's architecture, and a CSV export writes the same values with
other float rounding); the KV-cache dtype the file does not mark (an FP8 row of a deployment AIConfigurator's
generator wrote runs the FP8 cache it picked)."""

from silicon_csv import silicon_row

from servelab.calibrate.clients import client_settings
from servelab.calibrate.price import Pricer
from servelab.calibrate.rows import ENGINES, build_cases, to_case
from servelab.specs import Dtype, load_system


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


DYNAMO_RUN = (
    "source_file=/Users/x/aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/qwen3_32b.csv; gtl_job_id=1; "
    "gtl_task_id=2; measured=2026-01-23; image=nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.8.0; "
    "dynamo_version=0.8.0"
)
CAMPAIGN_CSV = (
    "source_file=/Users/x/aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/Qwen_Qwen3-32B.csv; "
    "silicon_concurrency=8"
)


def _qwen_row(engine: str, source: str, precision: str = "fp8") -> dict:
    quant = "fp8" if precision == "fp8" else ""
    row = silicon_row(0, engine, "Qwen/Qwen3-32B", "295", "16.9", "0.12.0", source)
    row.update(precision=precision, gemm_quant_mode=quant, moe_quant_mode=quant, system="h100_sxm")
    row.update(tp_size="1", moe_tp_size="0", moe_ep_size="0", batch_size="24", isl="4000", osl="1000")
    return row


def test_an_fp8_row_of_a_deployment_aiconfigurators_generator_wrote_runs_an_fp8_kv_cache():
    # AIConfigurator's pick on SM 89+ is an FP8 KV cache beside FP8 GEMMs, and its generator passes it as
    # --kv-cache-dtype (aiconfigurator 5e0243eb1: sdk/task.py _get_quant_mode, generator/module_bridge.py)
    generated = {e: to_case(_qwen_row(e, DYNAMO_RUN)).model.precision.kv_cache for e in ENGINES}
    assert generated == dict.fromkeys(ENGINES, Dtype.fp8)
    # the campaign's undated rows name no deployment: vLLM's and SGLang's default (auto: the BF16 cache)
    assert to_case(_qwen_row("vllm", CAMPAIGN_CSV)).model.precision.kv_cache == Dtype.bf16
    assert to_case(_qwen_row("sglang", CAMPAIGN_CSV)).model.precision.kv_cache == Dtype.bf16
    # a BF16 run of the same deployment picked a BF16 cache
    assert to_case(_qwen_row("vllm", DYNAMO_RUN, "bf16")).model.precision.kv_cache == Dtype.bf16


def test_the_fp8_cache_of_a_generated_deployment_shortens_its_decode_steps():
    # the mean decode step of 24 sequences of 4,000 + 1,000 tokens on one H100 (the static model, cheap):
    # it reads 33 GB of FP8 weights and every sequence's cache, half as many bytes in FP8 (about 28 -> 14 GB)
    pricer = Pricer(load_system("h100_sxm"), "static")
    fp8 = to_case(_qwen_row("vllm", DYNAMO_RUN))
    bf16 = to_case(_qwen_row("vllm", CAMPAIGN_CSV.replace("silicon_concurrency=8", "silicon_concurrency=24")))
    fp8.settings = bf16.settings = client_settings(fp8.silicon_source, fp8.engine)
    assert (fp8.parallel, fp8.concurrency, fp8.model.precision.weights) == (
        bf16.parallel,
        bf16.concurrency,
        bf16.model.precision.weights,
    )
    assert pricer(fp8, {})[1] < 0.9 * pricer(bf16, {})[1]
