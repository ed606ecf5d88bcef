"""The fresh closed-loop points read as replays (calibrate.closed_loop_fresh) and priced
(calibrate.closed_loop_fresh_price): every row parses into a replay without its measurement, one row of each
deployment group replays with its client's lengths, its pools and its KV-cache dtype, the measurements are
read one part at a time, and a development point is priced end to end. No held-out measurement is
read here."""

import csv
import math
import shutil
from pathlib import Path

import pytest

from servelab.calibrate.closed_loop_fresh import (
    MAX_SPREAD,
    read_measured,
    read_replays,
    to_replay,
)
from servelab.calibrate.closed_loop_fresh_price import band, price
from servelab.calibrate.closed_loop_split import fresh_held_out
from servelab.calibrate.rows import model_of
from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.specs import Dtype, Parallel

DATA = Path(__file__).resolve().parents[1] / "data"
FRESH = DATA / "closed_loop_fresh"
CONFIGS = {"minimaxai/minimax-m2.5": DATA / "closed_loop" / "aiconfigurator" / "minimax-m2.5" / "config.json"}
MEASURED = ("ttft_median_ms", "tpot_median_ms", "ttft_mean_ms", "tpot_mean_ms", "ttft_p99_ms", "tpot_p99_ms")
SGLANG_DSR1 = "inferencex@2a6a04c04:together_runner/baselines/b200/sglang/dsr1-fp4/1k1k/tuned/conc16.json"
VLLM_GPTOSS = "inferencex@2a6a04c04:together_runner/baselines/b200/vllm/gptoss-fp4/1k1k/untuned/conc16.json"
MI355X_GPTOSS = (
    "inferencex@a88fcacf7:benchmarks/multi_node/results/concurrency_4_req_rate_inf_gpus_16_ctx_8_gen_8.json"
)
MI355X_MINIMAX = (
    "inferencex@006dbc6f2:benchmarks/multi_node/results/minimax-m2.5/"
    "concurrency_4_req_rate_inf_gpus_16_ctx_8_gen_8.json"
)


def _rows() -> list[dict[str, str]]:
    with open(FRESH / "points.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def replays():
    return {r.row_id: r for r in read_replays(FRESH, CONFIGS)}


def _without_measurements(tmp_path: Path) -> Path:
    """A copy of the fresh folder whose measured columns are blank."""
    rows = _rows()
    for row in rows:
        for name in MEASURED:
            row[name] = ""
    with open(tmp_path / "points.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    shutil.copy(FRESH / "heldout.txt", tmp_path / "heldout.txt")
    return tmp_path


def test_every_row_parses_into_a_replay_without_reading_its_measurement(tmp_path, replays):
    blank = read_replays(_without_measurements(tmp_path), CONFIGS)
    assert [r.row_id for r in blank] == [row["id"] for row in _rows()]
    assert blank == list(replays.values()), "a replay changed when its measurement was blanked"
    for row in _rows():
        r = replays[row["id"]]
        assert r.heldout == fresh_held_out(row)
        assert (r.parallel is None) == (r.mode == "disagg") and (r.split is None) == (r.mode == "agg")
        assert r.num_prompts == 10 * r.concurrency
    assert sum(r.heldout for r in replays.values()) == 11
    assert len({r.group for r in replays.values()}) == 4


def test_an_sglang_together_runner_row_replays_its_mean_lengths_and_server_flags(replays):
    r = replays[SGLANG_DSR1]
    assert (r.engine, r.system, r.mode, r.concurrency) == (Engine.SGLANG, "b200_sxm", "agg", 16)
    # its client drew limits in [0, 1024]: the run's mean lengths, spread as widely as the simulator allows
    assert (r.isl, r.osl, r.spread) == (521, 501, MAX_SPREAD)
    assert r.parallel == Parallel(tp=8, ep=8)
    # nvidia/DeepSeek-R1-0528-FP4: NVFP4 weights and experts; --kv-cache-dtype fp8_e4m3
    p = r.model.precision
    assert (r.model.name, p.weights, p.experts, p.kv_cache) == (
        "deepseek-r1",
        Dtype.nvfp4,
        Dtype.nvfp4,
        Dtype.fp8,
    )
    s = r.settings
    assert (s.max_num_batched_tokens, s.max_num_seqs, s.cuda_graph_max_batch, s.memory_share) == (
        16384,
        256,
        256,
        0.85,
    )
    assert r.statistic == "median"


def test_a_vllm_together_runner_row_replays_its_early_stopped_outputs(replays):
    r = replays[VLLM_GPTOSS]
    assert (r.engine, r.parallel, r.concurrency) == (Engine.VLLM, Parallel(tp=4), 16)
    assert (r.isl, r.osl) == (521, 169)  # gpt-oss stopped at EOS: 169 output tokens on the mean, not 512
    assert r.model.precision.kv_cache == Dtype.fp8  # vllm_config.yaml kv-cache-dtype fp8
    assert r.model.precision.experts == Dtype.mxfp4
    assert (r.settings.max_num_batched_tokens, r.settings.max_num_seqs, r.settings.memory_share) == (
        8192,
        512,
        0.9,
    )


@pytest.mark.parametrize(
    ("row_id", "model", "ep", "weights"),
    [(MI355X_GPTOSS, "gpt-oss-120b", 1, Dtype.bf16), (MI355X_MINIMAX, "minimax-m2.5", 8, Dtype.fp8_block)],
)
def test_an_mi355x_disaggregated_row_replays_both_pools_at_fixed_lengths(replays, row_id, model, ep, weights):
    r = replays[row_id]
    assert (r.engine, r.system, r.mode, r.concurrency) == (Engine.VLLM, "mi355x", "disagg", 4)
    assert (r.isl, r.osl, r.spread) == (1024, 1024, 0.0)  # --random-range-ratio 1 --ignore-eos
    assert r.split is not None and r.parallel is None
    assert r.split.label() == f"1x {Parallel(tp=8, ep=ep).label()} | 1x {Parallel(tp=8, ep=ep).label()}"
    assert r.split.gpus == 16
    assert r.model.name == model and r.model.precision.weights == weights
    assert r.model.precision.kv_cache == Dtype.bf16  # `auto`, and neither checkpoint declares an FP8 cache
    assert r.statistic == "mean"


def test_the_fp4_checkpoint_is_the_nvfp4_reading_of_deepseek_r1_rows(replays):
    """nvidia/DeepSeek-R1-0528-FP4 is what calibrate.rows already reads an NVFP4 DeepSeek-R1 row as."""
    row = {
        "model_path": "deepseek-ai/DeepSeek-R1-0528",
        "gemm_quant_mode": "nvfp4",
        "moe_quant_mode": "nvfp4",
    }
    fields = {"name", "source"}
    assert replays[SGLANG_DSR1].model.model_dump(exclude=fields) == model_of(row).model_dump(exclude=fields)


def test_the_measurements_are_read_one_part_at_a_time():
    held = {row["id"] for row in _rows() if fresh_held_out(row)}
    dev = read_measured(FRESH, heldout=False)
    assert len(dev) == 16 and not set(dev) & held
    m = dev[MI355X_GPTOSS]  # a disaggregated point: compared at the mean its estimate states
    assert (m.ttft_ms, m.tpot_ms) == pytest.approx((330.796, 8.3866), rel=1e-4)


def test_a_development_point_priced_end_to_end(replays):
    r = replays[MI355X_GPTOSS]
    assert not r.heldout
    got = price(r)
    assert got["statistic"] == "mean"
    assert got["estimate"]["bound"] in ("decode", "prefill")
    for name in ("ttft", "tpot"):
        low, high = got[f"{name}_band"]
        assert 0 < low <= got[f"{name}_ms"] <= high
    parts = got["estimate"]["ttft_parts_ms"]
    assert got["ttft_ms"] == pytest.approx(sum(parts.values()))
    assert sum(got["kernel_time_by_source"].values()) == pytest.approx(1.0, abs=1e-3)


def test_band_reads_the_percentile_band_where_the_estimate_has_one():
    data = {
        "ttft_ms": 10.0,
        "ttft_ms_low": 8.0,
        "ttft_ms_high": 14.0,
        "percentiles_low": {"ttft_ms": {"p50": 7.0}},
        "percentiles_high": {"ttft_ms": {"p50": 12.0}},
    }
    assert band(data, "ttft_ms", "median") == (7.0, 12.0)
    assert band(data, "ttft_ms", "mean") == (8.0, 14.0)
    assert band({"ttft_ms": 10.0}, "ttft_ms", "mean") is None


def test_band_places_the_claimed_serving_band_around_the_compared_statistic():
    # an aggregated estimate's claimed band (predict.bands) is a pair of log-residual quantiles: at the
    # median it lies around p50, not around the headline mean, and it wins over the kernel-source bands
    data = {
        "ttft_ms": 20.0,
        "ttft_ms_low": 10.0,
        "ttft_ms_high": 30.0,
        "percentiles": {"ttft_ms": {"p50": 10.0, "mean": 20.0}},
        "percentiles_low": {"ttft_ms": {"p50": 9.0}},
        "percentiles_high": {"ttft_ms": {"p50": 11.0}},
        "band": {"claim": 0.8, "ttft_ms": {"claim": 0.8, "log_residual_quantiles": [-0.5, 0.25]}},
    }
    low, high = band(data, "ttft_ms", "median")
    assert low == pytest.approx(10.0 * math.exp(-0.5)) and high == pytest.approx(10.0 * math.exp(0.25))
    low, high = band(data, "ttft_ms", "mean")
    assert low == pytest.approx(20.0 * math.exp(-0.5)) and high == pytest.approx(20.0 * math.exp(0.25))


def test_a_row_with_an_unknown_kv_cache_dtype_is_one_line_naming_the_field():
    row = next(row for row in _rows() if row["id"] == MI355X_GPTOSS)
    with pytest.raises(ServelabError) as e:
        to_replay({**row, "kv_cache_dtype": "int3"}, frozenset(), CONFIGS)
    assert e.value.field == "kv_cache_dtype" and "int3" in str(e.value)


def test_an_aggregated_point_states_the_band_servelab_estimate_states(replays):
    # priced from the replay's settings alone (no measurement is read): the band compared is the one
    # `servelab estimate --mode agg` states; a B200 point lies outside the residuals' H200 rows, so it claims
    # no coverage, says why, and its kernel-source band (the percentiles at the low and high clocks) stays
    r = replays[VLLM_GPTOSS]
    got = price(r)
    assert got["statistic"] == "median"
    stated = got["estimate"]["band"]
    assert stated["claim"] is None and "system b200_sxm, the rows' h200_sxm" in stated["source"]
    for name in ("ttft", "tpot"):
        low, high = got[f"{name}_band"]
        p50 = {end: got["estimate"][f"percentiles{end}"][f"{name}_ms"]["p50"] for end in ("_low", "_high")}
        assert (low, high) == (min(p50.values()), max(p50.values()))
