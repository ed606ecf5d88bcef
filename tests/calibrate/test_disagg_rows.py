"""calibrate.disagg_rows (read by accuracy/disagg_rows.py): AIConfigurator's measured disagg rows read, split
into development and held-out parts, mapped onto servelab's specs (or counted by why not) and priced."""

import csv
from pathlib import Path

import pytest

from servelab.calibrate import disagg_rows as rows_mod
from servelab.calibrate.clients import AICONFIGURATOR_LENGTHS
from servelab.calibrate.recipes import INFERENCEX_RANGE_RATIO
from servelab.predict.engines import engine_profile
from servelab.predict.plan.split import price_given_split, split_context
from servelab.specs import Dtype, load_system

DATA = Path(__file__).resolve().parents[2] / "tests/data/closed_loop"
CSV = DATA / "aiconfigurator/silicon_sample_rows.csv"
HEADER = next(csv.reader(open(CSV)))
R1 = {
    "backend": "trtllm", "backend_version": "1.0.0", "model_path": "deepseek-ai/DeepSeek-R1",
    "system": "h200_sxm", "precision": "fp8", "mode": "disagg", "isl": "1024", "osl": "1024",
    "gemm_quant_mode": "fp8_block", "moe_quant_mode": "fp8_block",
    "silicon_ttft_ms": "500", "silicon_tpot_ms": "20",
    # prefill: 1 worker of attention DP 8 x MoE EP 8; decode: 2 workers of TP 8 x EP 8
    "prefill_batch_size": "1", "prefill_num_workers": "1", "prefill_tp_size": "1", "prefill_pp_size": "1",
    "prefill_attention_dp_size": "8", "prefill_moe_tp_size": "1", "prefill_moe_ep_size": "8",
    "decode_batch_size": "16", "decode_num_workers": "2", "decode_tp_size": "8", "decode_pp_size": "1",
    "decode_attention_dp_size": "1", "decode_moe_tp_size": "1", "decode_moe_ep_size": "8",
}  # fmt: skip


def _row(row_id: str, concurrency: int = 64, **changes) -> dict:
    src = f"db-dump/2026-04-27; silicon_concurrency={concurrency}"  # a row of InferenceX's database
    return {key: "" for key in HEADER} | R1 | {"id": row_id, "silicon_data_source": src} | changes


@pytest.fixture
def files(tmp_path):
    rows = [
        _row("dev-r1"),
        _row("held-r1", 128),
        _row("no-workers", prefill_num_workers="", decode_num_workers=""),
        _row("kimi", model_path="example-org/Unembedded-MoE"),
        _row("agg-row", mode="agg"),
    ]
    path = tmp_path / "rows.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=HEADER)
        writer.writeheader()
        writer.writerows(rows)
    held = tmp_path / "heldout.txt"
    held.write_text("# held out\nheld-r1\n")
    return path, held


def test_parts_are_disjoint_and_disagg_only(files):
    path, held = files
    dev = [r["id"] for r in rows_mod.disagg_rows("dev", path, held)]
    out = [r["id"] for r in rows_mod.disagg_rows("heldout", path, held)]
    assert dev == ["dev-r1", "no-workers", "kimi"] and out == ["held-r1"]


def test_rows_map_onto_pools_and_unpriceable_ones_are_counted(files):
    path, held = files
    priced, skipped = rows_mod.price_rows(rows_mod.disagg_rows("dev", path, held), lambda s: None)
    assert skipped == {"no prefill_num_workers": 1, "model example-org/Unembedded-MoE is not embedded": 1}
    ((row, pred),) = priced
    # attention DP 8 x MoE EP 8 reads as tp8 ep8 with attention data parallel
    assert row.split.label() == "1x tp8-ep8-dpattn | 2x tp8-ep8" and row.split.gpus == 24
    assert row.concurrency == 64
    assert pred["ttft_ms"] > 0 and pred["tpot_ms"] > 0 and pred["bound"] in ("decode", "prefill")
    errs = rows_mod.errors(row, pred)
    assert errs["ttft"] == pytest.approx(abs(pred["ttft_ms"] - 500) / 500)


def test_throughput_is_littles_law_per_gpu(files):
    path, held = files
    row, _ = rows_mod.to_row(rows_mod.disagg_rows("dev", path, held)[0])
    # 64 clients, each request 500 ms + 1023 x 20 ms; 1024 tokens each over 24 GPUs
    assert rows_mod.throughput(row, 500.0, 20.0) == pytest.approx(64 * 1024 / 20.96 / 24)


def test_an_fp4_row_of_an_fp8_checkpoint_prices_nvfp4_weights_and_fp8_kv():
    # calibrate.rows.model_of's rule, which the disagg rows share
    raw = _row("fp4", precision="fp4", gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4")
    _, model = rows_mod.to_row(raw)
    assert model.precision.weights == Dtype.nvfp4 and model.precision.kv_cache == Dtype.fp8
    _, fp8 = rows_mod.to_row(_row("fp8"))
    assert fp8.precision.weights == Dtype.fp8_block


def test_summary_counts_ttft_within_one_and_a_half_times():
    by = {"throughput_by_ttft": 0.0, "throughput_by_tpot": 0.3}
    errs = [{"ttft": 0.1, "tpot": 0.2, "throughput": 0.3, "ttft_within": 1.0} | by,
            {"ttft": 0.9, "tpot": 0.4, "throughput": 0.5, "ttft_within": 0.0} | by]  # fmt: skip
    s = rows_mod.summarize(errs)
    assert s["n"] == 2 and s["median_ttft"] == pytest.approx(0.5) and s["ttft_within_1.5x"] == 0.5


def test_the_throughput_error_is_split_by_the_figure_it_misses_by(files):
    path, held = files
    row, _ = rows_mod.to_row(rows_mod.disagg_rows("dev", path, held)[0])
    # TTFT right, TPOT 25 % slow: the whole throughput error is TPOT's
    errs = rows_mod.errors(row, {"ttft_ms": 500.0, "tpot_ms": 25.0})
    assert errs["throughput_by_ttft"] == 0.0
    assert errs["throughput_by_tpot"] == errs["throughput"] == pytest.approx(1 - 20.96 / (0.5 + 1023 * 0.025))
    # TPOT right, TTFT twice the measured: TTFT's
    errs = rows_mod.errors(row, {"ttft_ms": 1000.0, "tpot_ms": 20.0})
    assert errs["throughput_by_tpot"] == 0.0 and errs["throughput_by_ttft"] == errs["throughput"] > 0


def test_a_row_is_priced_as_sa_bench_measured_it(files):
    """srt-slurm's sa-bench drew lengths uniform in [0.8 L, L] (mean 922 of 1024, spread 1/9 of it either
    way) and ran 10 x C prompts, the clients starting together on an idle deployment."""
    path, held = files
    raw = rows_mod.disagg_rows("dev", path, held)[0]
    ((_, pred),), _ = rows_mod.price_rows([raw], lambda s: None)
    row, model = rows_mod.to_row(raw)
    assert row.client_range_ratio == INFERENCEX_RANGE_RATIO
    system = load_system(row.system)
    engine = engine_profile(row.engine, system.hbm_gib, gpu_name=system.gpu_name)
    ctx = split_context(engine.model_as_served(model), system, engine, row.split, 922, 922, 1 / 9)
    wl = ctx.workload(64, 1)
    low, high = wl.isl * (1 - wl.range_ratio), wl.isl * (1 + wl.range_ratio)  # the simulator's length range
    assert low == pytest.approx(0.8 * 1024, abs=1) and high == pytest.approx(1024, abs=1)
    got = price_given_split(ctx, row.split, 64, num_prompts=640)
    assert (pred["ttft_ms"], pred["tpot_ms"]) == (got.point.ttft[0], got.point.tpot[0])
    steady = price_given_split(ctx, row.split, 64)
    assert pred["tpot_ms"] == steady.point.tpot[0] and pred["ttft_ms"] >= steady.point.ttft[0]


def test_each_development_row_replays_the_client_that_measured_it():
    # InferenceX's rows (its database dump, its dated exports) ran sa-bench's [0.8 L, L]; AIConfigurator's own
    # campaign (aic-auto-gap-analysis) its client's nominal lengths, as its aggregated rows do
    raws = rows_mod.disagg_rows("dev", CSV, DATA / "heldout.txt")
    by_client: dict[float, set[str]] = {}
    for raw in raws:
        campaign = "aiconfigurator" if "aic-auto-gap-analysis" in raw["silicon_data_source"] else "inferencex"
        by_client.setdefault(rows_mod.client_range_ratio(raw), set()).add(campaign)
    assert by_client == {INFERENCEX_RANGE_RATIO: {"inferencex"}, AICONFIGURATOR_LENGTHS: {"aiconfigurator"}}


def test_a_development_row_of_aiconfigurators_own_campaign_sends_every_prompt_whole():
    # one client, 4,000-token prompts on SGLang (H100, Qwen3-32B): at the nominal lengths the prefill of every
    # prompt is that of 4,000 tokens, where sa-bench's spread would average 3,600 and take less
    raw = next(
        r
        for r in rows_mod.disagg_rows("dev", CSV, DATA / "heldout.txt")
        if r["id"] == "qwen3_32b_qwen3_32b_h100_sxm_sglang_disagg_4000x1000_c_tpnone_epnone_1"
    )
    ((row, pred),), _ = rows_mod.price_rows([raw], lambda s: None)
    assert row.client_range_ratio == AICONFIGURATOR_LENGTHS and row.concurrency == 1
    _, model = rows_mod.to_row(raw)
    system = load_system(row.system)
    engine = engine_profile(row.engine, system.hbm_gib, gpu_name=system.gpu_name)
    served = engine.model_as_served(model)
    whole = split_context(served, system, engine, row.split, 4000, 1000, 0.0)
    assert pred["ttft_ms"] == price_given_split(whole, row.split, 1, num_prompts=10).point.ttft[0]
    spread = split_context(served, system, engine, row.split, 3600, 900, 1 / 9)
    assert pred["ttft_ms"] > 1.05 * price_given_split(spread, row.split, 1, num_prompts=10).point.ttft[0]
