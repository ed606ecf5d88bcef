"""Calibration rows replayed with the settings of the InferenceX recipe that measured them
(calibrate/recipes.py, data/inferencex_recipes.json: TensorRT-LLM's, SGLang's DeepSeek-R1 and vLLM's
gpt-oss-120b and Llama-3.1-70B H200 recipes), and the Pricer applying them."""

from dataclasses import replace
from pathlib import Path

import pytest

from servelab.calibrate import price as price_module
from servelab.calibrate import recipes
from servelab.calibrate.document import RecipeCounts
from servelab.calibrate.engines import recipe_counts
from servelab.calibrate.price import Pricer, defaults, lengths_up_to
from servelab.calibrate.recipe_table import Branch, ConcTimes, IslTimes, RecipeTable, pick, read_recipe_table
from servelab.calibrate.recipes import Load, RunSettings, find_recipe, run_settings
from servelab.calibrate.rows import to_case
from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.specs import Dtype, Parallel, load_system
from servelab.traffic.lengths import length_bounds


def _load(**kw) -> Load:
    return Load(**(dict(tp=8, dp_attn=False, concurrency=64, isl=1024, osl=1024) | kw))


def _dsr1(date: str, **kw) -> RunSettings | None:
    return run_settings("trtllm", "deepseek-r1", "h200_sxm", date, _load(**kw))


def test_the_table_names_where_each_range_was_read():
    table = read_recipe_table()
    assert "InferenceX" in table.provenance and len(table.inferencex_head) == 40
    for r in table.recipes:
        assert r.versions and all(len(v.commit) == 40 and v.file for v in r.versions)
        assert r.versions[0].date == r.start and all(r.until is None or v.date <= r.until for v in r.versions)
        assert r.until is None or r.start < r.until
    # a setting chosen by the load is a typed branch; a recorded one keeps the script's own value
    dsr1 = next(r for r in table.recipes if r.engine == Engine.SGLANG and r.until is None)
    assert isinstance(dsr1.settings.max_running_requests, Branch)
    assert dsr1.settings.recorded == {
        "stream_interval": 10,
        "attention_backend": "flashinfer",
        "disable_radix_cache": True,
    }


def test_the_recipe_is_the_one_in_use_on_the_measured_date():
    assert find_recipe("trtllm", "deepseek-r1", "h200_sxm", "2025-08-01") is None  # before the first recipe
    assert find_recipe("vllm", "deepseek-r1", "h200_sxm", "2025-11-02") is None
    # InferenceX put a floor of 8192 under the DeepSeek-R1 token budget on 2026-01-21
    assert _dsr1("2026-01-14").max_num_batched_tokens == 1152  # (64 + 1024 + 64) rounded up to 64
    assert _dsr1("2026-01-28").max_num_batched_tokens == 8192
    # a database dump's DeepSeek-V3 name for the same runs finds the same recipe
    assert run_settings("trtllm", "deepseek-v3", "h200_sxm", "2026-01-14", _load()) == _dsr1("2026-01-14")


def test_settings_follow_the_rows_split_and_load():
    plain, dp = _dsr1("2025-12-15"), _dsr1("2025-12-15", dp_attn=True)
    assert (plain.memory_share, plain.cuda_graph_max_batch, plain.max_num_seqs) == (0.75, 128, None)
    assert not plain.attention_dp_balance  # balancing is set only with attention DP
    assert dp.attention_dp_balance and (
        dp.attention_dp_timeout_iters,
        dp.attention_dp_batching_wait_iters,
    ) == (
        60,
        0,
    )
    oss = run_settings(
        "trtllm", "gpt-oss-120b", "h200_sxm", "2025-12-15", _load(tp=2, concurrency=32, osl=8192)
    )
    assert (oss.max_num_batched_tokens, oss.max_num_seqs, oss.cuda_graph_max_batch, oss.memory_share) == (
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
            _load(tp=tp, concurrency=16, isl=isl, osl=osl),
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
    assert llama(4, 8192, 1024).max_num_batched_tokens == 16384


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
    small = replace(base, settings=RunSettings(recipe="test", max_num_batched_tokens=256))
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
        price(replace(base, settings=RunSettings(recipe="test", memory_share=0.0001)), params)


def test_a_recipe_without_chunked_prefill_takes_each_prompt_whole():
    """TensorRT-LLM's enable_chunked_prefill off: a prompt joins a step only whole, so a 1,536-token budget
    carries one ~1,024-token prompt a step where chunking packs one and a half; first tokens come later."""
    whole = RunSettings(recipe="test", max_num_batched_tokens=1536, chunked_prefill=False)
    assert whole.engine_overrides(8192)["chunked_prefill"] is False
    assert "chunked_prefill" not in RunSettings(recipe="test").engine_overrides(8192)  # the engine's default
    price = Pricer(load_system("h200_sxm"), "auto", prompts_per_concurrency=2)
    params = defaults()["trtllm"]
    base = replace(to_case(_row("silicon_concurrency=16")), concurrency=16, parallel=Parallel(tp=8, ep=8))
    chunked = replace(base, settings=RunSettings(recipe="test", max_num_batched_tokens=1536))
    assert price(replace(base, settings=whole), params)[0] > 1.05 * price(chunked, params)[0]


def test_the_summary_counts_rows_replayed_with_recipe_settings():
    dated = to_case(_row("silicon_concurrency=64; measured=2026-01-14T00:00:00Z"))
    undated = to_case(_row("silicon_concurrency=64"))
    assert recipe_counts([dated, undated, dated]) == {
        "trtllm": RecipeCounts(with_recipe=2, engine_defaults=1)
    }


def test_sglang_deepseek_rows_get_the_launch_of_their_lengths():
    def sglang(date: str, model: str = "deepseek-r1", **kw) -> RunSettings | None:
        return run_settings("sglang", model, "h200_sxm", date, _load(**kw))

    short, long = sglang("2026-03-25"), sglang("2026-03-25", isl=8192)
    assert (short.max_num_batched_tokens, short.max_prefill_tokens, short.memory_share) == (
        32768,
        32768,
        0.82,
    )
    # the recipe launches with 512 running requests and CUDA graphs at 1024/1024, 256 otherwise
    assert (short.max_num_seqs, short.cuda_graph_max_batch) == (512, 512)
    assert (long.max_num_seqs, long.cuda_graph_max_batch) == (256, 256)
    assert short.stream_interval == 10
    assert dict(short.unpriced) == {"attention_backend": "flashinfer", "disable_radix_cache": True}
    assert sglang("2026-03-25", model="deepseek-v3") == short
    # the label names the version in use that day (the range of equal settings runs on to later files)
    assert "benchmarks/single_node/dsr1_fp8_h200.sh@41aff0afc" in short.recipe
    assert sglang("2025-09-01") is None  # before InferenceX's first SGLang DeepSeek-R1 H200 script


def test_vllm_rows_get_the_recipe_of_their_date():
    def oss(date: str) -> RunSettings | None:
        return run_settings("vllm", "gpt-oss-120b", "h200_sxm", date, _load(tp=1, concurrency=32))

    nov = oss("2025-11-02")
    assert (nov.max_num_batched_tokens, nov.max_num_seqs, nov.cuda_graph_max_batch, nov.memory_share) == (
        8192,
        32,  # --max-num-seqs $CONC
        2048,
        0.9,
    )
    assert dict(nov.unpriced)["async_scheduling"] is True and nov.kv_cache_dtype is None
    assert dict(oss("2025-11-10").unpriced)["cudagraph_mode"] == "PIECEWISE"  # 2025-11-04 to 2025-12-05
    march = dict(oss("2026-03-27").unpriced)
    assert "async_scheduling" not in march and march["VLLM_MXFP4_USE_MARLIN"] == 1  # dropped with vLLM 0.15.1
    llama = run_settings("vllm", "llama-3.1-70b", "h200_sxm", "2025-10-29", _load(tp=2))
    assert llama.kv_cache_dtype == Dtype.fp8 and llama.max_num_seqs == 64
    # TensorRT-LLM's recipes name theirs too: fp8 for DeepSeek-R1, the checkpoint's own (auto) for gpt-oss
    assert _dsr1("2026-01-14").kv_cache_dtype == Dtype.fp8
    trt_oss = run_settings("trtllm", "gpt-oss-120b", "h200_sxm", "2025-12-15", _load(tp=2))
    assert trt_oss.kv_cache_dtype is None


def test_max_prefill_tokens_caps_the_token_budget():
    def budget(**kw) -> int | None:
        return RunSettings(recipe="test", **kw).engine_overrides(8192).get("max_num_batched_tokens")

    assert budget() is None  # the engine's default stays
    assert budget(max_prefill_tokens=4096) == 4096  # below SGLang's default chunk
    assert budget(max_num_batched_tokens=32768, max_prefill_tokens=32768) == 32768  # InferenceX's recipe
    assert budget(max_num_batched_tokens=2048, max_prefill_tokens=16384) == 2048


def test_a_kv_dtype_servelab_cannot_represent_leaves_the_row_out(monkeypatch):
    entry = {
        "engine": "vllm",
        "models": ["llama-3.1-70b"],
        "system": "h200_sxm",
        "from": "2025-01-01",
        "until": None,
        "versions": [{"commit": "0" * 40, "date": "2025-01-01", "file": "x.sh"}],
        "settings": {"kv_cache_dtype": "int4"},
    }
    table = RecipeTable.model_validate(
        {"_provenance": "test", "inferencex_head": "0" * 40, "recipes": [entry]}
    )
    monkeypatch.setattr(recipes, "recipe_table", lambda: table)
    with pytest.raises(ValueError, match="KV-cache dtype int4"):
        run_settings("vllm", "llama-3.1-70b", "h200_sxm", "2025-10-29", _load())


def _llama_row(engine: str) -> dict:
    row = _row("silicon_concurrency=16; measured=2025-10-29T10:00:00Z")
    row.update(
        backend=engine, backend_version="", model_path="meta-llama/Llama-3.1-70B", gemm_quant_mode="fp8"
    )
    row.update(attention_dp_size="1", moe_ep_size="1", batch_size="16")
    return row


def test_the_pricer_applies_the_recipes_kv_dtype_and_prefill_cap():
    price = Pricer(load_system("h200_sxm"), "auto", prompts_per_concurrency=2)
    case = to_case(_llama_row("vllm"))
    assert case.settings.kv_cache_dtype == Dtype.fp8 and case.model.precision.kv_cache == Dtype.bf16
    params = defaults()["vllm"]
    # an FP8 cache halves the KV bytes every decode step reads
    assert price(case, params)[1] < price(replace(case, settings=None), params)[1]
    # SGLang's max_prefill_tokens below the chunk size prices as that smaller budget
    sglang = replace(case, engine="sglang")
    capped = RunSettings(recipe="test", max_num_batched_tokens=32768, max_prefill_tokens=1024)
    plain = RunSettings(recipe="test", max_num_batched_tokens=1024)
    params = defaults()["sglang"]
    assert price(replace(sglang, settings=capped), params) == price(replace(sglang, settings=plain), params)
    assert price(replace(sglang, settings=capped), params) != price(replace(sglang, settings=None), params)


def test_inferencex_rows_are_replayed_with_its_clients_lengths():
    # InferenceX's client draws lengths uniform in [0.8 L, L]: the replay's mean is 0.9 L and its spread
    # reaches L, where the replay of other rows draws U[0.8 L, 1.2 L]
    assert _dsr1("2026-01-14").client_range_ratio == 0.8
    (isl, osl), ratio = lengths_up_to(1024, 8192, 0.8)
    assert (isl, osl) == (922, 7373)
    lo, hi = length_bounds(isl, ratio)
    assert abs(lo - 819) <= 1 and abs(hi - 1024) <= 1
    price = Pricer(load_system("h200_sxm"), "auto", prompts_per_concurrency=2)
    case = to_case(_llama_row("vllm"))
    params = defaults()["vllm"]
    as_written = replace(case, settings=RunSettings(recipe="test"))
    inferencex = replace(case, settings=RunSettings(recipe="test", client_range_ratio=0.8))
    assert price(inferencex, params)[0] < price(as_written, params)[0]  # shorter prompts, sooner first tokens


def test_the_pricer_leaves_the_memory_share_to_the_engine_and_a_recipes_graph_batch_to_the_recipe(
    monkeypatch,
):
    """Without a recipe share each engine keeps its own default (SGLang's mem_fraction_static by GPU and
    split, not vLLM's 0.9); a recipe's --cuda-graph-max-bs replaces SGLang's graph batch by split."""
    seen = {}

    def capture(model, system, parallel, engine, *args, gpu_memory_utilization=None, **kw):
        seen.update(share=gpu_memory_utilization, engine=engine)
        raise ServelabError("captured")

    monkeypatch.setattr(price_module, "estimate_aggregated", capture)
    price = Pricer(load_system("h200_sxm"), "auto", prompts_per_concurrency=2)
    base = replace(to_case(_row("silicon_concurrency=16")), engine="sglang", settings=None)
    with pytest.raises(ServelabError, match="captured"):
        price(base, defaults()["sglang"])
    assert seen["share"] is None and seen["engine"].kv_static_fraction and seen["engine"].cuda_graph_by_split
    recipe = RunSettings(recipe="test", cuda_graph_max_batch=128, memory_share=0.82)
    with pytest.raises(ServelabError, match="captured"):
        price(replace(base, settings=recipe), defaults()["sglang"])
    assert seen["share"] == 0.82
    assert seen["engine"].cuda_graph_max_batch == 128 and not seen["engine"].cuda_graph_by_split


# MiniMax-M2.5 is not embedded: its rows are read with the config.json pinned beside the closed-loop results
MINIMAX = {
    "minimaxai/minimax-m2.5": Path(__file__).resolve().parents[1]
    / "data/closed_loop/aiconfigurator/minimax-m2.5/config.json"
}


def _minimax_row(system: str, precision: str, measured: str, tp: int = 2, conc: int = 256, isl: int = 8192):
    quant = "nvfp4" if precision == "fp4" else "fp8"
    row = _row(f"silicon_concurrency={conc}; measured={measured}T00:00:00.000Z")
    row.update(backend="vllm", backend_version="0.19.0", model_path="MiniMaxAI/MiniMax-M2.5", system=system)
    row.update(
        precision=precision, gemm_quant_mode=quant, moe_quant_mode=quant, isl=str(isl), batch_size=str(conc)
    )
    row.update(tp_size=str(tp), attention_dp_size="1", moe_tp_size=str(tp), moe_ep_size="1")
    return row


def test_a_budget_written_as_a_multiple_of_the_input_length_follows_the_row():
    assert pick(IslTimes(isl_times=2), _load(isl=8192)) == 16384
    assert pick(IslTimes(isl_times=2), _load(isl=1024)) == 2048


def test_a_count_written_as_a_multiple_of_the_concurrency_follows_the_row():
    assert pick(ConcTimes(conc_times=2), _load(concurrency=64)) == 128


def test_kimi_rows_get_the_script_of_their_gpu_and_precision():
    """InferenceX's Kimi-K2.5 vLLM scripts: one per GPU and checkpoint, Moonshot's INT4 (rows of precision
    int4) and NVIDIA's NVFP4 (fp4); the B200 INT4 one turned FlashInfer's INT4 MoE on from 79ea3651a."""
    int4 = find_recipe(Engine.VLLM, "kimi-k2.5", "b200_sxm", "2026-03-25", "int4")
    assert int4 is not None
    assert ("VLLM_USE_FLASHINFER_MOE_INT4", 1) in int4.settings.resolve(_load()).get("unpriced", ())
    fp4 = find_recipe(Engine.VLLM, "kimi-k2.5", "b200_sxm", "2026-03-25", "fp4")
    assert fp4 is not None and "kimik2.5_fp4_b200.sh" in fp4.in_use("2026-03-25").file
    assert find_recipe(Engine.VLLM, "kimi-k2.5", "h200_sxm", "2026-03-25", "fp4") is None


def test_minimax_rows_get_the_script_of_their_gpu_and_precision():
    """InferenceX keeps one MiniMax-M2.5 vLLM script per GPU and precision: the B200/B300 ones set an FP8 KV
    cache, a budget of twice the input length, CUDA graphs to 2,048, a 0.9 share and 20 tokens a streamed
    chunk (from 2026-04-03 on the B200); the H100 one 256 sequences; the H200 one a 0.95 share; a row
    measured before its GPU's script (a work-in-progress run) keeps the engine's defaults."""
    fp8 = to_case(_minimax_row("b300_sxm", "fp8", "2026-04-21"), MINIMAX).settings
    assert fp8 is not None and "minimaxm2.5_fp8_b300.sh" in fp8.recipe
    assert (fp8.kv_cache_dtype, fp8.max_num_batched_tokens, fp8.cuda_graph_max_batch, fp8.memory_share) == (
        Dtype.fp8,
        16384,
        2048,
        0.9,
    )
    fp4 = to_case(_minimax_row("b300_sxm", "fp4", "2026-04-21"), MINIMAX).settings
    assert fp4 is not None and "minimaxm2.5_fp4_b300.sh" in fp4.recipe
    # both send a running request's tokens 20 at a time (--stream-interval 20), which the replay prices
    assert fp8.stream_interval == fp4.stream_interval == 20
    assert fp8.engine_overrides(8192)["stream_interval"] == 20
    assert "stream_interval" not in dict(fp8.unpriced)
    assert to_case(_minimax_row("b300_sxm", "fp8", "2026-04-03"), MINIMAX).settings is None
    # the first B200 FP8 script (vLLM 0.17.0) kept vLLM's BF16 cache at a 0.95 share
    march = to_case(_minimax_row("b200_sxm", "fp8", "2026-03-11"), MINIMAX).settings
    assert march is not None and (march.kv_cache_dtype, march.memory_share) == (None, 0.95)
    h100 = to_case(_minimax_row("h100_sxm", "fp8", "2026-03-27", tp=4), MINIMAX).settings
    assert h100 is not None and h100.max_num_seqs == 256
    h200 = to_case(_minimax_row("h200_sxm", "fp8", "2026-03-28", tp=4), MINIMAX).settings
    assert h200 is not None and h200.memory_share == 0.95 and h200.kv_cache_dtype is None


def test_the_recipes_fp8_cache_holds_what_the_engine_default_queues():
    """256 clients of up to 8,192 + 1,024 tokens on two B300s: the FP8 cache the script sets holds every
    sequence (twice the tokens of vLLM's default BF16 cache, `--kv-cache-dtype auto` for this checkpoint),
    where the BF16 one holds about half of them and the rest queue for their first token."""
    price = Pricer(load_system("b300_sxm"), "aggregated", prompts_per_concurrency=2)
    case = to_case(_minimax_row("b300_sxm", "fp8", "2026-04-21"), MINIMAX)
    params = defaults()["vllm"]
    recipe = price.estimate(case, params)
    default = price.estimate(replace(case, settings=replace(case.settings, kv_cache_dtype=None)), params)
    assert recipe.memory["max_kv_tokens"] > 1.9 * default.memory["max_kv_tokens"]
    assert recipe.scheduler["kv_max_sequences"] >= 256 > default.scheduler["kv_max_sequences"]
    assert recipe.scheduler["preemptions"] == 0 < default.scheduler["preemptions"]
    # the first wave's prompts (all 256 at once) are computed either way; the queue is the BF16 cache's
    assert default.percentiles["ttft_ms"]["p50"] > 3 * recipe.percentiles["ttft_ms"]["p50"]


def test_gpt_oss_vllm_rows_on_b200_and_h100_get_their_gpus_script():
    """From 2026-01-22 InferenceX keeps one vLLM gpt-oss script per GPU: the B200 one sets an FP8 cache and
    512 sequences (benchmarks/single_node/gptoss_fp4_b200.sh), the H100 one the client concurrency; before it
    (side-by-side _docker and _slurm scripts) a row keeps the engine's defaults."""

    def oss(system: str, date: str) -> RunSettings | None:
        return run_settings("vllm", "gpt-oss-120b", system, date, _load(tp=4, concurrency=32))

    b200 = oss("b200_sxm", "2026-02-25")
    assert b200 is not None and "gptoss_fp4_b200.sh" in b200.recipe
    assert b200.kv_cache_dtype == Dtype.fp8 and b200.max_num_seqs == 512
    assert b200.max_num_batched_tokens == 8192 and b200.memory_share == 0.9
    assert dict(b200.unpriced)["VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8"] == 1  # recorded; the roofline's rate
    h100 = oss("h100_sxm", "2026-03-27")
    assert h100 is not None and "gptoss_fp4_h100.sh" in h100.recipe
    assert (h100.kv_cache_dtype, h100.max_num_seqs) == (None, 32)
    assert oss("b200_sxm", "2025-11-02") is None and oss("h100_sxm", "2025-12-08") is None


def test_minimax_rows_whose_script_turned_on_expert_parallelism_read_as_ep_over_every_gpu():
    """InferenceX's H200 MiniMax-M2.5 FP8 script launched vLLM with --enable-expert-parallel for every job
    from 5e2c705d3 (2026-03-13) to 8014ee637 (2026-05-26), as its first B200 FP8 script did from f342df18e
    (2026-03-11) to bddbf4031 (2026-04-03); their rows record ep 1. vLLM then splits the experts over all the
    engine's GPUs (FusedMoEParallelConfig.make, vLLM 0.18.0: ep_size = tp_size x dp_size), so the rows read
    as tp T x ep T; the H200 TP4 rows of 2026-03-01 (a36346339, no EP switch) keep ep 1."""
    tp8 = to_case(_minimax_row("h200_sxm", "fp8", "2026-03-28", tp=8, conc=4, isl=1024), MINIMAX)
    assert tp8.parallel == Parallel(tp=8, ep=8)
    assert tp8.settings is not None and tp8.settings.expert_parallel
    assert "expert parallel over 8 GPUs" in tp8.note
    tp4 = to_case(_minimax_row("h200_sxm", "fp8", "2026-03-01", tp=4, conc=4, isl=1024), MINIMAX)
    assert tp4.parallel == Parallel(tp=4) and tp4.settings is not None and not tp4.settings.expert_parallel
    later = to_case(_minimax_row("h200_sxm", "fp8", "2026-05-26", tp=8, conc=4, isl=1024), MINIMAX)
    assert later.parallel == Parallel(tp=8)  # `-gt 1`: the job's ep, as the row records it
    b200 = to_case(_minimax_row("b200_sxm", "fp8", "2026-03-20", tp=4), MINIMAX)
    assert b200.parallel == Parallel(tp=4, ep=4)
    assert to_case(_minimax_row("b200_sxm", "fp8", "2026-04-21", tp=4), MINIMAX).parallel == Parallel(tp=4)


def test_the_twin_prices_an_expert_parallel_row_with_whole_experts_per_gpu():
    """The same H200 row priced as read (ep 8) and as written (ep 1): vLLM's EP puts 32 whole experts on each
    GPU instead of a 1/8 slice of all 256, which changes the decode step's price (TPOT)."""
    price = Pricer(load_system("h200_sxm"), "aggregated", prompts_per_concurrency=2)
    case = to_case(_minimax_row("h200_sxm", "fp8", "2026-03-28", tp=8, conc=16, isl=1024), MINIMAX)
    params = defaults()["vllm"]
    as_read = price.estimate(case, params)
    as_written = price.estimate(replace(case, parallel=Parallel(tp=8)), params)
    assert (as_read.parallel, as_written.parallel) == ("tp8-ep8", "tp8")
    assert as_read.percentiles["tpot_ms"]["p50"] != as_written.percentiles["tpot_ms"]["p50"]


def _b200_llama_row(precision: str, measured: str) -> dict:
    """A B200 vLLM Llama-3.1-70B row as AIConfigurator's export writes InferenceX's runs of 2025-10-29."""
    row = _llama_row("vllm")
    row.update(silicon_data_source=f"source_file=2026-04-06.csv; silicon_concurrency=64; measured={measured}")
    row.update(system="b200_sxm", precision=precision, tp_size="1", batch_size="64", isl="8192")
    row.update(gemm_quant_mode="nvfp4" if precision == "fp4" else "fp8")
    return row


def test_llama_vllm_rows_on_b200_get_the_docker_script_of_their_precision():
    """InferenceX ran vLLM's Llama-3.3-70B jobs on B200 with one docker script per precision
    (benchmarks/70b_{fp8,fp4}_b200_docker.sh, 4b860b78e): an FP8 cache, 512 sequences, an 8,192-token
    budget and a 0.9 share, async scheduling; a row measured before the FP4 script keeps the defaults."""
    for precision in ("fp8", "fp4"):
        case = to_case(_b200_llama_row(precision, "2025-10-29T00:00:00.000Z"))
        s = case.settings
        assert s is not None and f"70b_{precision}_b200_docker.sh" in s.recipe
        assert (s.kv_cache_dtype, s.max_num_seqs, s.max_num_batched_tokens, s.memory_share) == (
            Dtype.fp8,
            512,
            8192,
            0.9,
        )
        assert dict(s.unpriced)["async_scheduling"] is True  # recorded: vLLM 0.14's default is the same
    assert to_case(_b200_llama_row("fp4", "2025-09-20T00:00:00.000Z")).settings is None
    # the FP8 cache holds twice the tokens of the BF16 one the row's checkpoint names: 64 clients of up to
    # 9,216 tokens fit one B200 (65 sequences), which a BF16 cache (about 32) does not
    price = Pricer(load_system("b200_sxm"), "aggregated", prompts_per_concurrency=2)
    case = to_case(_b200_llama_row("fp8", "2025-10-29T00:00:00.000Z"))
    assert case.model.precision.kv_cache == Dtype.bf16
    params = defaults()["vllm"]
    assert price(case, params)[0] < price(replace(case, settings=None), params)[0] / 2
