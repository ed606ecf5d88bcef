"""Calibration rows replayed with the settings of the InferenceX recipe that measured them
(calibrate/recipes.py, data/inferencex_recipes.json), and the Pricer applying them."""

import json
from dataclasses import replace
from importlib import resources

import pytest

from servelab.calibrate.engines import recipe_counts
from servelab.calibrate.price import Pricer, defaults
from servelab.calibrate.recipes import RunSettings, find_recipe, run_settings
from servelab.calibrate.rows import to_case
from servelab.errors import ServelabError
from servelab.specs import load_system


def _dsr1(date: str, **kw) -> RunSettings | None:
    load = dict(tp=8, dp_attn=False, concurrency=64, isl=1024, osl=1024) | kw
    return run_settings("trtllm", "deepseek-r1", "h200_sxm", date, **load)


def test_the_table_names_where_each_range_was_read():
    doc = json.loads((resources.files("servelab.calibrate") / "data" / "inferencex_recipes.json").read_text())
    assert "InferenceX" in doc["_provenance"] and len(doc["inferencex_head"]) == 40
    for r in doc["recipes"]:
        assert r["commits"] and all(len(c) == 40 for c in r["commits"]) and r["files"]
        assert r["until"] is None or r["from"] < r["until"]


def test_the_recipe_is_the_one_in_use_on_the_measured_date():
    assert find_recipe("trtllm", "deepseek-r1", "h200_sxm", "2025-08-01") is None  # before the first recipe
    assert find_recipe("vllm", "deepseek-r1", "h200_sxm", "2025-11-02") is None
    # InferenceX put a floor of 8192 under the DeepSeek-R1 token budget on 2026-01-21
    assert _dsr1("2026-01-14").max_num_tokens == 1152  # (64 + 1024 + 64) rounded up to 64
    assert _dsr1("2026-01-28").max_num_tokens == 8192
    # a database dump's DeepSeek-V3 name for the same runs finds the same recipe
    v3 = run_settings(
        "trtllm",
        "deepseek-v3",
        "h200_sxm",
        "2026-01-14",
        tp=8,
        dp_attn=False,
        concurrency=64,
        isl=1024,
        osl=1024,
    )
    assert v3 == _dsr1("2026-01-14")


def test_settings_follow_the_rows_split_and_load():
    plain, dp = _dsr1("2025-12-15"), _dsr1("2025-12-15", dp_attn=True)
    assert (plain.kv_memory_fraction, plain.cuda_graph_max_batch, plain.max_batch_size) == (0.75, 128, None)
    assert not plain.attention_dp_balance  # balancing is set only with attention DP
    assert dp.attention_dp_balance and (
        dp.attention_dp_timeout_iters,
        dp.attention_dp_batching_wait_iters,
    ) == (
        60,
        0,
    )
    oss = run_settings(
        "trtllm",
        "gpt-oss-120b",
        "h200_sxm",
        "2025-12-15",
        tp=2,
        dp_attn=False,
        concurrency=32,
        isl=1024,
        osl=8192,
    )
    assert (oss.max_num_tokens, oss.max_batch_size, oss.cuda_graph_max_batch, oss.kv_memory_fraction) == (
        20000,
        32,
        32,
        0.85,
    )
    assert oss.stream_interval == 20

    def llama(tp, isl, osl):
        return run_settings(
            "trtllm",
            "llama-3.1-70b",
            "h200_sxm",
            "2025-10-29",
            tp=tp,
            dp_attn=False,
            concurrency=16,
            isl=isl,
            osl=osl,
        )

    # the batch wait is set for 1k/1k below tp 8 only
    assert (
        llama(4, 1024, 1024).batch_wait_timeout_iters,
        llama(4, 1024, 1024).batch_wait_max_tokens_ratio,
    ) == (
        20,
        0.9,
    )
    assert llama(8, 1024, 1024).batch_wait_timeout_iters == 0
    assert llama(4, 8192, 1024).batch_wait_timeout_iters == 0
    assert llama(4, 8192, 1024).max_num_tokens == 16384


def _row(source: str) -> dict:
    return {
        "id": "r1",
        "silicon_data_source": source,
        "backend": "trtllm",
        "backend_version": "1.1.0rc2",
        "model_path": "deepseek-ai/DeepSeek-R1",
        "system": "h200_sxm",
        "precision": "fp8",
        "mode": "agg",
        "isl": "1024",
        "osl": "1024",
        "gemm_quant_mode": "fp8_block",
        "batch_size": "64",
        "tp_size": "1",
        "pp_size": "1",
        "attention_dp_size": "8",
        "moe_tp_size": "1",
        "moe_ep_size": "8",
        "silicon_ttft_ms": "3000",
        "silicon_tpot_ms": "30",
    }


def test_a_csv_row_carries_its_date_and_recipe_settings():
    case = to_case(_row("source_file=2026-03-25.csv; silicon_concurrency=64; measured=2026-01-14T22:26:21Z"))
    assert case.measured == "2026-01-14" and case.parallel.dp_attn
    assert case.settings is not None and case.settings.attention_dp_balance
    assert "dsr1_fp8_h200_trt" in case.settings.recipe
    undated = to_case(_row("source_file=2026-04-06.csv; silicon_concurrency=64"))
    assert undated.measured == "" and undated.settings is None  # the engine's defaults


def test_the_pricer_replays_a_case_with_its_settings():
    system = load_system("h200_sxm")
    price = Pricer(system, "auto", prompts_per_concurrency=2)
    params = defaults()["trtllm"]
    base = replace(to_case(_row("silicon_concurrency=16")), concurrency=16, settings=None)
    ttft, tpot = price(base, params)
    # a 256-token budget splits each 1024-token prompt over four steps, each paying the step's overheads
    small = replace(base, settings=RunSettings(recipe="test", max_num_tokens=256))
    assert price(small, params)[0] > 1.2 * ttft
    # balancing new prompts across the 8 ranks holds them back
    balanced = RunSettings(
        recipe="test",
        attention_dp_balance=True,
        attention_dp_timeout_iters=60,
        attention_dp_batching_wait_iters=0,
    )
    assert price(replace(base, settings=balanced), params)[0] > ttft
    # the KV memory share reaches the memory model: too little for one sequence is refused
    with pytest.raises(ServelabError, match="KV cache"):
        price(replace(base, settings=RunSettings(recipe="test", kv_memory_fraction=0.0001)), params)


def test_the_summary_counts_rows_replayed_with_recipe_settings():
    dated = to_case(_row("silicon_concurrency=64; measured=2026-01-14T00:00:00Z"))
    undated = to_case(_row("silicon_concurrency=64"))
    assert recipe_counts([dated, undated, dated]) == {"trtllm": {"with_recipe": 2, "engine_defaults": 1}}
