"""The calibration replays a silicon_sample.csv row that no recipe covers as its campaign's client sent it
(calibrate/clients.py, `Pricer(as_sent=True)`, `calibrate engines --as-sent`): AIConfigurator's own rows at
the nominal lengths, InferenceX's at [0.8 L, L], the campaign's vLLM rows with the token budget and sequence
cap AIConfigurator's generator launches vLLM with; SGLang's --enable-mixed-chunk only as the what-if."""

from dataclasses import replace

import pytest
from clirun import servelab
from silicon_csv import silicon_row

from servelab.calibrate import price as price_module
from servelab.calibrate.clients import AICONFIGURATOR_CLIENT, client_settings, measured_by_inferencex
from servelab.calibrate.price import LENGTH_SPREAD, Pricer, defaults
from servelab.calibrate.recipes import INFERENCEX_RANGE_RATIO, RunSettings
from servelab.calibrate.rows import to_case
from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.specs import load_system

# the silicon_data_source of AIConfigurator's own H200 rows, as the pinned silicon_sample.csv writes them
# (ai-dynamo/aiconfigurator 095f58a), and of an undated InferenceX export
GAP_ANALYSIS = (
    "source_file=/Users/harrli/projects/aic-auto-gap-analysis/data/h200_sxm/{engine}/{version}/{file}"
)
SGLANG_LLAMA = GAP_ANALYSIS.format(
    engine="sglang", version="0.5.6.post2", file="meta-llama_Llama-3.1-8B-Instruct.csv; silicon_concurrency=8"
)
VLLM_QWEN = GAP_ANALYSIS.format(
    engine="vllm", version="0.12.0", file="Qwen_Qwen3-235B-A22B-FP8.csv; silicon_concurrency=8"
)
INFERENCEX_UNDATED = "source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=8"


def _llama(engine: str, source: str):
    """A Llama-3.1-8B row on one H200, 8 clients of 2,000 + 500 tokens."""
    row = silicon_row(0, engine, "meta-llama/Llama-3.1-8B-Instruct", "100", "10", "0.5.6.post2", source)
    row.update(tp_size="1", moe_tp_size="1", precision="bf16", gemm_quant_mode="bf16", isl="2000", osl="500")
    return to_case(row)


def _sent(monkeypatch, case, **pricer) -> dict:
    """What the pricer hands the simulator for `case`: its workload and engine profile."""
    seen = {}

    def capture(model, system, parallel, engine, *args, workload=None, **kw):
        seen.update(workload=workload, engine=engine)
        raise ServelabError("captured")

    monkeypatch.setattr(price_module, "estimate_aggregated", capture)
    price = Pricer(load_system("h200_sxm"), "auto", prompts_per_concurrency=2, **pricer)
    with pytest.raises(ServelabError, match="captured"):
        price(case, defaults()[case.engine])
    return seen


def test_a_calibration_row_of_aiconfigurators_campaign_is_replayed_at_its_nominal_lengths(monkeypatch):
    case = _llama("sglang", SGLANG_LLAMA)
    assert case.settings is None and not measured_by_inferencex(case.silicon_source)  # no recipe covers it
    sent = _sent(monkeypatch, case, as_sent=True)["workload"]
    assert (sent.isl, sent.osl, sent.range_ratio) == (2000, 500, 0)  # every request at 2,000 + 500 tokens
    assert sent.num_requests == 20 * 8  # the campaign's undated SGLang rows: one pool of 20 x C requests
    # the replay of a row of unknown client (the default) spreads them over [0.8, 1.2] x nominal, and sends
    # the pricer's own requests per client
    spread = _sent(monkeypatch, case)["workload"]
    assert (spread.isl, spread.osl, spread.range_ratio) == (2000, 500, LENGTH_SPREAD)
    assert spread.num_requests == 2 * 8


def test_an_undated_inferencex_row_is_replayed_with_inferencexs_client():
    case = _llama("vllm", INFERENCEX_UNDATED)
    assert measured_by_inferencex(case.silicon_source) and case.settings is None
    assert client_settings(case.silicon_source, case.engine).client_range_ratio == INFERENCEX_RANGE_RATIO


def test_a_models_gap_analysis_file_is_replayed_with_inferencexs_client():
    # its rows copy InferenceX's runs (tests/calibrate/test_closed_loop_data.py shows it on the pinned rows)
    source = "source_file=qwen3.5-397b-gap-analysis.csv; silicon_concurrency=4; aic_database_mode=SILICON"
    assert measured_by_inferencex(source)
    sent = client_settings(source, Engine.SGLANG, clients=4, isl=1024)
    assert sent.client_range_ratio == INFERENCEX_RANGE_RATIO and sent.requests_per_client is None
    # a file of AIConfigurator's own campaign stays its benchmark's, whatever the file is called
    assert not measured_by_inferencex(
        SGLANG_LLAMA.replace("meta-llama_Llama-3.1-8B-Instruct", "m-gap-analysis")
    )


def test_a_recipe_row_keeps_its_recipe_as_sent(monkeypatch):
    case = replace(
        _llama("sglang", SGLANG_LLAMA), settings=RunSettings(recipe="test", client_range_ratio=0.8)
    )
    sent = _sent(monkeypatch, case, as_sent=True, aic_mixed_chunk=True)
    assert sent["workload"].isl == 1800 and sent["workload"].range_ratio > 0  # InferenceX's [0.8 L, L]
    assert not sent["engine"].policy.mixed_chunk


def test_the_mixed_chunk_rule_keeps_sglangs_default_and_the_what_if_sets_it_on_sglang_rows_only(monkeypatch):
    sglang = _llama("sglang", SGLANG_LLAMA)
    rule = client_settings(sglang.silicon_source, Engine.SGLANG)
    assert (
        rule.recipe == AICONFIGURATOR_CLIENT and rule.mixed_chunk is None
    )  # the rows do not say: the default
    assert not _sent(monkeypatch, sglang, as_sent=True)["engine"].policy.mixed_chunk
    assert _sent(monkeypatch, sglang, as_sent=True, aic_mixed_chunk=True)["engine"].policy.mixed_chunk
    # vLLM has no such flag (its V1 scheduler always mixes prompt chunks with decodes): nothing is set
    vllm = to_case(
        dict(
            silicon_row(1, "vllm", "Qwen/Qwen3-235B-A22B-FP8", "100", "10", "0.12.0", VLLM_QWEN), tp_size="8"
        )
    )
    assert client_settings(vllm.silicon_source, Engine.VLLM, mixed_chunk=True).mixed_chunk is None
    # an InferenceX row is never given the what-if flag
    assert client_settings(INFERENCEX_UNDATED, Engine.SGLANG, mixed_chunk=True).mixed_chunk is None


def test_the_mixed_chunk_what_if_needs_the_replay_as_sent():
    got = servelab("calibrate", "engines", "--dry-run", "--aic-mixed-chunk")
    assert got.returncode == 2, got.stderr
    (line,) = got.stderr.strip().splitlines()
    assert "--aic-mixed-chunk" in line and "--as-sent" in line


VLLM_QWEN_H100 = (
    "source_file=/Users/harrli/projects/aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/Qwen_Qwen3-32B.csv; "
    "silicon_concurrency=8"
)


def test_the_campaigns_vllm_rows_run_the_launch_aiconfigurators_generator_writes():
    # generator/rule_plugin/vllm.rule: agg max_num_tokens = max_batch_size + isl + 1500, max_batch_size as
    # --max-num-seqs
    vllm = client_settings(VLLM_QWEN, Engine.VLLM, clients=8, isl=2000)
    assert (vllm.max_num_batched_tokens, vllm.max_num_seqs) == (8 + 2000 + 1500, 8)
    assert vllm.recipe == AICONFIGURATOR_CLIENT and vllm.client_range_ratio == 1.0
    # not SGLang's rows (its generator rule is another), not InferenceX's, not a source outside the campaign,
    # not a row whose load is not given
    for source, engine in (
        (SGLANG_LLAMA, Engine.SGLANG),
        (INFERENCEX_UNDATED, Engine.VLLM),
        ("source_file=other.csv; silicon_concurrency=8", Engine.VLLM),
    ):
        rule = client_settings(source, engine, clients=8, isl=2000)
        assert (rule.max_num_batched_tokens, rule.max_num_seqs) == (None, None), source
    assert client_settings(VLLM_QWEN, Engine.VLLM).max_num_batched_tokens is None


def test_the_calibrations_replay_as_sent_gives_the_engine_the_generators_budget(monkeypatch):
    case = _llama("vllm", VLLM_QWEN.replace("Qwen_Qwen3-235B-A22B-FP8", "meta-llama_Llama-3.1-8B-Instruct"))
    engine = _sent(monkeypatch, case, as_sent=True)["engine"]
    assert (engine.max_num_batched_tokens, engine.max_num_seqs) == (8 + 2000 + 1500, 8)
    # replayed as a row of unknown client (the calibration's default), vLLM's own default budget on an H200
    assert _sent(monkeypatch, case)["engine"].max_num_batched_tokens == 8192


def test_with_the_generators_budget_eight_short_prompts_do_not_all_wait_for_one_step():
    # Qwen3-32B on 8 H100s, 8 clients of 1,024 + 128 tokens: at vLLM's 8,192-token budget a wave of seven
    # prompts prefills in one step and each first token waits for all seven; at 8 + 1,024 + 1,500 tokens a
    # step holds two prompts and a bit, and the wave's first tokens come step by step
    row = silicon_row(0, "vllm", "Qwen/Qwen3-32B", "91", "8.7", "0.12.0", VLLM_QWEN_H100)
    row.update(system="h100_sxm", precision="", gemm_quant_mode="", moe_quant_mode="", batch_size="8")
    row.update(tp_size="8", moe_tp_size="0", isl="1024", osl="128")
    case = to_case(row)
    price = Pricer(load_system("h100_sxm"), "aggregated", prompts_per_concurrency=4, as_sent=True)
    launched = price.estimate(case, {})
    default = price.estimate(replace(case, settings=RunSettings(recipe="test", client_range_ratio=1.0)), {})
    assert launched.percentiles["ttft_ms"]["mean"] < 0.7 * default.percentiles["ttft_ms"]["mean"]


# a dated TensorRT-LLM row of AIConfigurator's campaign: a Dynamo 0.8.0 deployment its generator wrote
# (silicon_sample.csv at ai-dynamo/aiconfigurator 095f58a)
TRTLLM_DYNAMO_QWEN_H100 = (
    "source_file=/Users/harrli/projects/aic-auto-gap-analysis/data/h100_sxm/trtllm/1.2.0rc6.post1/"
    "qwen3_32b.csv; "
    "gtl_job_id=23364591; gtl_task_id=102487519; measured=2026-01-23; "
    "image=nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.0; dynamo_version=0.8.0"
)


def test_the_campaigns_dynamo_trtllm_rows_run_the_launch_aiconfigurators_generator_writes():
    # generator/rule_plugin/trtllm.rule of January 2026: agg max_num_tokens = max_batch_size + isl + 1500,
    # CUDA graphs for batches 1..max_batch_size; its 1.2.0rc6.post1 template: no chunked prefill, KV share
    # 0.80
    sent = client_settings(TRTLLM_DYNAMO_QWEN_H100, Engine.TRTLLM, clients=32, isl=4000)
    assert (sent.max_num_batched_tokens, sent.max_num_seqs) == (32 + 4000 + 1500, 32)
    assert (sent.chunked_prefill, sent.cuda_graph_max_batch, sent.memory_share) == (False, 32, 0.80)
    assert sent.client_range_ratio == 1.0
    # not the campaign's undated 1.0.0rc3 rows (no launch recorded), not a deployment whose clients were
    # spread over several workers (silicon_concurrency above the worker's batch)
    undated = GAP_ANALYSIS.format(
        engine="trtllm", version="1.0.0rc3", file="Qwen_Qwen3-32B.csv; silicon_concurrency=8"
    )
    spread = TRTLLM_DYNAMO_QWEN_H100.replace(
        "gtl_task_id=102487519;", "gtl_task_id=1; silicon_concurrency=192;"
    )
    for source in (undated, spread):
        rule = client_settings(source, Engine.TRTLLM, clients=32, isl=4000)
        assert (rule.max_num_batched_tokens, rule.chunked_prefill, rule.memory_share) == (None, None, None)


def _dynamo_qwen_tp1():
    """The campaign's Qwen3-32B FP8 row on one H100: 32 clients of 4,000 + 1,000 tokens."""
    row = silicon_row(0, "trtllm", "Qwen/Qwen3-32B", "694", "22.4", "1.2.0rc6.post1", TRTLLM_DYNAMO_QWEN_H100)
    row.update(
        system="h100_sxm", precision="fp8", gemm_quant_mode="fp8", moe_quant_mode="fp8", batch_size="32"
    )
    row.update(tp_size="1", moe_tp_size="1", isl="4000", osl="1000")
    return to_case(row)


def test_the_calibrations_replay_as_sent_launches_a_dynamo_trtllm_row_as_the_generator_did(monkeypatch):
    engine = _sent(monkeypatch, _dynamo_qwen_tp1(), as_sent=True)["engine"]
    assert (engine.max_num_batched_tokens, engine.max_num_seqs, engine.chunked_prefill) == (5532, 32, False)
    assert engine.cuda_graph_max_batch == 32
    # replayed as a row of unknown client (the calibration's default): TensorRT-LLM's own 8,192 tokens
    assert _sent(monkeypatch, _dynamo_qwen_tp1())["engine"].max_num_batched_tokens == 8192


def test_with_the_generators_launch_a_dynamo_trtllm_rows_prompts_prefill_one_a_step():
    # Qwen3-32B FP8 on one H100, 32 clients of 4,000 + 1,000 tokens: the replay's TensorRT-LLM defaults
    # (8,192 tokens a step, chunked) put two prompts and a chunk of a third in a step, and their first tokens
    # wait for it; 32 + 4,000 + 1,500 tokens unchunked hold one prompt a step
    # (10 x C requests, as the campaign's harness sent: the first wave's cold start no longer dominates)
    case = _dynamo_qwen_tp1()
    price = Pricer(load_system("h100_sxm"), "aggregated", prompts_per_concurrency=10, as_sent=True)
    launched = price.estimate(case, {})
    default = price.estimate(replace(case, settings=RunSettings(recipe="test", client_range_ratio=1.0)), {})
    assert launched.percentiles["ttft_ms"]["mean"] < 0.85 * default.percentiles["ttft_ms"]["mean"]


def test_the_campaigns_undated_rows_send_the_requests_their_means_average_over():
    # accuracy/aic_request_counts.py: the undated TensorRT-LLM and SGLang points' means are whole (in ns) over
    # 20 x C requests, some over 20 x C - 1 (one pool with a request lost); the vLLM 0.12.0 ones over 10 x C
    def undated(engine: str, version: str) -> str:
        return GAP_ANALYSIS.format(
            engine=engine, version=version, file="Qwen_Qwen3-32B.csv; silicon_concurrency=8"
        )

    assert client_settings(undated("trtllm", "1.0.0rc3"), Engine.TRTLLM).requests_per_client == 20
    assert client_settings(undated("sglang", "0.5.1.post1"), Engine.SGLANG).requests_per_client == 20
    assert client_settings(undated("vllm", "0.12.0"), Engine.VLLM).requests_per_client == 10
    # a dated Dynamo row shows no count, nor is InferenceX's client AIConfigurator's: the replay's own
    dated = client_settings(TRTLLM_DYNAMO_QWEN_H100, Engine.TRTLLM, clients=32, isl=4000)
    assert dated.requests_per_client is None
    assert client_settings(INFERENCEX_UNDATED, Engine.VLLM).requests_per_client is None


def test_a_rows_own_request_count_replaces_the_pricers_but_not_its_steady_state(monkeypatch):
    case = replace(_llama("sglang", SGLANG_LLAMA), settings=RunSettings(recipe="test", requests_per_client=3))
    assert _sent(monkeypatch, case)["workload"].num_requests == 3 * 8
    # prompts_per_concurrency 0 prices the simulator's steady state, with no request count at all
    seen = {}

    def capture(model, system, parallel, engine, *args, workload=None, **kw):
        seen.update(workload=workload)
        raise ServelabError("captured")

    monkeypatch.setattr(price_module, "estimate_aggregated", capture)
    price = Pricer(load_system("h200_sxm"), "aggregated", prompts_per_concurrency=0)
    with pytest.raises(ServelabError, match="captured"):
        price(case, defaults()[case.engine])
    assert seen["workload"] is None
