"""The pinned public closed-loop results (tests/data/closed_loop) and their held-out split: the split file is
the rule's (a hash of each deployment group, scripts/refresh_closed_loop.py), and each point is read with the
protocol its client ran."""

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest
from accuracy_python import run_accuracy_python

from servelab.calibrate import closed_loop_split as split
from servelab.calibrate.clients import (
    FIXED_LENGTHS,
    INFERENCEX_CLIENT,
    INFERENCEX_WARMUP_SINCE,
    cold_inferencex_row,
    measured_by_inferencex,
)
from servelab.calibrate.closed_loop import EVIDENCE_ONLY_MODELS, heldout_ids, read_points
from servelab.calibrate.price import Pricer
from servelab.calibrate.recipes import INFERENCEX_RANGE_RATIO
from servelab.calibrate.rows import model_of
from servelab.calibrate.sources import read_silicon
from servelab.engines import Engine
from servelab.predict.engines import MOE_TERMS, read_calibration, shipped_calibration
from servelab.specs import load_system

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "closed_loop"


def test_the_heldout_file_is_the_hash_rule_applied_to_the_pinned_rows():
    with open(DATA / "aiconfigurator" / "silicon_sample_rows.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    names = sorted(p.name for p in (DATA / "inferencex" / "results").glob("*.json"))
    expected = {r["id"] for r in rows if split.held_out(split.silicon_key(r))}
    expected |= {n for n in names if split.held_out(split.ix_key(n))}
    assert heldout_ids(DATA) == expected
    # a sweep's concurrencies fall on one side together, and the share is near the rule's
    assert 0.3 < len(expected) / (len(rows) + len(names)) < 0.5
    sweeps = {}
    for n in names:
        sweeps.setdefault(split.ix_key(n), set()).add(n in expected)
    assert all(len(sides) == 1 for sides in sweeps.values())


def test_no_row_the_calibration_fits_is_pinned():
    # `servelab calibrate engines` fits the H200 aggregated rows of the checkpoints calibrate/rows.py maps to
    # an embedded model without a config.json, but for those it keeps as closed-loop evidence only: none of
    # them may be pinned here (calibrate/sources.py reads the pinned rows as it reads AIConfigurator's sample)
    path = DATA / "aiconfigurator" / "silicon_sample_rows.csv"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    fitted = [r for r in rows if r["system"] == "h200_sxm" and r["mode"] == "agg"]
    assert fitted, "the pin holds H200 aggregated rows of models the calibration does not embed"
    for r in fitted:
        if r["model_path"].lower() in EVIDENCE_ONLY_MODELS:
            continue  # embedded since, and left out of the calibration's sources (below)
        with pytest.raises(ValueError, match="not embedded"):
            model_of(r)
    # a model embedded after its rows were pinned (GLM-5) is mapped, but the calibration's reader drops its
    # rows: the pinned file read as a calibration source gives no case at all
    _, cases, record = read_silicon(DATA / "aiconfigurator" / "silicon_sample_rows.csv", "pinned", "h200_sxm")
    held = sum(r["model_path"].lower() in EVIDENCE_ONLY_MODELS for r in rows if r["system"] == "h200_sxm")
    assert held and not [c for c in cases if c.model.name == "glm-5"]
    assert (
        record.rows_skipped["pinned as closed-loop evidence (calibrate/closed_loop.py EVIDENCE_ONLY_MODELS)"]
        == held
    )


def test_points_carry_the_protocol_their_client_ran():
    points, skipped = read_points(DATA, ("h200_sxm", "h100_sxm"))
    token_position = [p for p in points if p.source == "inferencex-token-position"]
    assert len(token_position) == len(list((DATA / "inferencex" / "results").glob("*.json")))
    one = next(p for p in token_position if p.key == "minimax_m25_vllm_dep8_isl1024_osl128_conc16.json")
    raw = json.loads((DATA / "inferencex" / "results" / one.key).read_text())
    assert one.case.engine == Engine.VLLM and one.case.parallel.dp_attn and one.case.parallel.ep == 8
    assert one.case.ttft_ms == raw["median_ttft"] * 1e3 and one.ttft_p99_ms == raw["p99_ttft"] * 1e3
    assert one.case.settings is not None and one.case.settings.client_range_ratio == FIXED_LENGTHS
    # a silicon row InferenceX measured runs its client's lengths, AIConfigurator's own rows its client's
    # (every request at the nominal lengths)
    by_source = {p.source: p for p in points}
    ix = by_source["inferencex"].case.settings
    assert ix is not None and ix.client_range_ratio == INFERENCEX_RANGE_RATIO
    aic = [p.case.settings for p in points if p.source == "aiconfigurator"]
    assert aic and all(s is not None and s.client_range_ratio == FIXED_LENGTHS for s in aic)
    # rows left out are counted by reason (since Qwen3.5 was embedded, no H200 or H100 row is left out as
    # "not embedded": duplicates remain)
    assert any("duplicate of another row" in why for why in skipped)
    # MiniMax-M2.5 is not embedded: its silicon rows are read from the pinned config.json, as one family
    minimax = [p for p in points if p.source != "inferencex-token-position" and p.case.family == "minimax"]
    assert minimax and all(p.case.model.name == "minimax-m2.5" for p in minimax)


def test_inferencex_rows_measured_before_its_client_warmed_up_are_told_apart():
    # InferenceX's client sends 2 x C warm-up requests since d053ae24e (2026-01-21); its rows of SGLang
    # DeepSeek-R1 FP4 on B200 of 2025-11-10 were measured on a server it had not warmed up, those of
    # 2026-03-25 after the warm-up: the same deployment and load, replayed alike, reported apart
    points, _ = read_points(DATA, ("b200_sxm",))
    by_id = {p.key: p for p in points}
    cold = by_id["dsr1_b200_sglang_fp4_agg_1024x1024_c32_cfg99"]
    warm = by_id["dsr1_b200_sglang_fp4_agg_1024x1024_c32_cfg201"]
    assert cold.case.measured == "2025-11-10" and cold.source == "inferencex-no-warmup"
    assert warm.case.measured == "2026-03-25" and warm.source == "inferencex"
    for p in (cold, warm):
        assert p.case.engine == Engine.SGLANG and p.case.parallel.tp == 8 and p.case.concurrency == 32
        assert p.case.settings is not None and p.case.settings.client_range_ratio == INFERENCEX_RANGE_RATIO
    # the split follows the date alone: every InferenceX row before it is cold, none after it, and an undated
    # one (a model's gap-analysis file) is not called cold
    for p in points:
        if p.source.startswith("inferencex"):
            cold = bool(p.case.measured) and p.case.measured < INFERENCEX_WARMUP_SINCE
            assert (p.source == "inferencex-no-warmup") == cold
    assert {p.source for p in points} >= {"inferencex", "inferencex-no-warmup"}


def test_a_models_gap_analysis_file_carries_inferencexs_measurements_and_is_replayed_with_its_client():
    # AIConfigurator's qwen3.5-397b-gap-analysis.csv and kimi-k2.5-gap-analysis.csv (ed133e9d1, "add older
    # bench data") copy InferenceX's runs: wherever the development part has InferenceX's row of the same
    # deployment and load, the file's TTFT and TPOT are that row's to the file's two decimals (held-out
    # points are dropped before anything is compared)
    points, _ = read_points(DATA, ("b200_sxm",))
    dev = [p for p in points if not p.heldout]
    gap = [p for p in dev if "gap-analysis.csv" in p.case.silicon_source]
    assert {p.case.model.name for p in gap} == {"qwen3.5-397b-a17b"}  # every Kimi-K2.5 one is a copy (below)

    def load(p):
        c = p.case
        return (c.engine, c.model.source, c.parallel, c.concurrency, c.isl, c.osl)

    def measured(p):
        return (round(p.case.ttft_ms, 2), round(p.case.tpot_ms, 2))

    theirs = {}
    for p in dev:
        if "gap-analysis.csv" not in p.case.silicon_source and p.source == "inferencex":
            theirs.setdefault(load(p), set()).add(measured(p))
    # 15 of Qwen3.5's 42 had that row beside them; a copy is now left out as a duplicate (measured values to
    # two decimals, the dated original kept: calibrate/rows.py), so none is counted twice
    copies = [p for p in gap if measured(p) in theirs.get(load(p), ())]
    assert copies == [] and 0 < len([p for p in gap if p.case.model.name == "qwen3.5-397b-a17b"]) < 42
    # what is left of the files is InferenceX's, sent as its client sends (lengths in [0.8 L, L], no recipe)
    for p in gap:
        assert p.source == "inferencex" and p.case.settings is not None
        assert p.case.settings.client_range_ratio == INFERENCEX_RANGE_RATIO
        assert p.case.settings.recipe == INFERENCEX_CLIENT
    # AIConfigurator's own campaign (its aic-auto-gap-analysis folder) keeps its client
    aic = "source_file=/x/aic-auto-gap-analysis/data/b200_sxm/sglang/0.5.9/qwen3.5-gap-analysis.csv"
    assert not measured_by_inferencex(aic)


def test_a_row_is_cold_only_if_inferencex_measured_it_before_the_warm_up():
    dump = "db-dump/2026-04-27; config_id=99; silicon_concurrency=32; measured=2025-11-10T00:00:00.000Z"
    assert cold_inferencex_row(dump, "2025-11-10")
    assert not cold_inferencex_row(dump, INFERENCEX_WARMUP_SINCE)  # the day the warm-up landed: not cold
    assert not cold_inferencex_row(dump, "")  # undated: nothing says it was cold
    aic = "source_file=/x/aic-auto-gap-analysis/data/h200_sxm/sglang/0.5.6.post2/m.csv; silicon_concurrency=8"
    assert not cold_inferencex_row(aic, "2025-11-10")  # AIConfigurator's own benchmark warms up


def test_sglang_keeps_a_wave_of_identical_requests_together_and_its_first_tokens_wait_for_it():
    # AIConfigurator's client sends identical requests. SGLang runs waiting prompts before the decodes
    # (prefill first), so the clients that a wave releases together are prefilled back to back, decode as one
    # batch and finish together: every decode step carries all of them, the prefill of the wave lands on the
    # first tokens, and less of it between tokens than when the clients' lengths differ (calibrate's spread).
    # Under SGLang's overlap scheduler a client released at a step's end can be taken in one step later, so
    # the decode batch is whole on all but a few steps
    points, _ = read_points(DATA, ("h100_sxm",))
    point = next(p for p in points if p.key.endswith("sglang_agg_1024x128_c16_tp8_epnone_3"))
    assert not point.heldout and point.case.engine == Engine.SGLANG
    pricer = Pricer(load_system("h100_sxm"), "aggregated")
    waves = pricer.estimate(point.case, {})
    spread = pricer.estimate(replace(point.case, settings=None), {})
    whole = waves.scheduler["mean_decode_batch_per_lane"]
    assert point.case.concurrency - 0.25 <= whole <= point.case.concurrency
    assert spread.scheduler["mean_decode_batch_per_lane"] < whole
    assert waves.ttft_ms > 2 * spread.ttft_ms
    assert waves.tpot_ms < spread.tpot_ms


def test_the_accuracy_script_refuses_a_folder_without_the_pinned_layout(tmp_path):
    (tmp_path / "heldout.txt").write_text("")  # the split file alone: the silicon rows are missing
    err = run_accuracy_python(
        [
            str(ROOT / "accuracy" / "closed_loop.py"),
            "--data",
            str(tmp_path),
            "--out",
            str(tmp_path / "o.json"),
        ],
        returncode=2,
    )
    assert err.startswith(f"error: --data {tmp_path}: expected a folder of pinned closed-loop data")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_accuracy_script_leaves_out_the_families_it_is_asked_to(tmp_path):
    # --skip-families: the figures on the points an earlier pricing could price (one development Kimi-K2.5
    # point here, priced without the flag and left out with it)
    point = "2026_03_25_kimi_k2_5_h200_sxm_vllm_int4_agg_8192x1024_c4_tp8_0_ep1_0_597"
    args = [str(ROOT / "accuracy" / "closed_loop.py"), "--systems", "h200_sxm", "--only", point]
    priced = run_accuracy_python([*args, "--out", str(tmp_path / "a.json")])
    skipped = run_accuracy_python(
        [*args, "--out", str(tmp_path / "b.json"), "--skip-families", "glm-5,kimi-k2.5"]
    )
    assert "== development part: 1 points priced" in priced
    assert "== development part: 0 points priced" in skipped
    # --skip-models: a model of a family the others share (Qwen3.5 is a "qwen"), by its servelab name
    by_model = run_accuracy_python([*args, "--out", str(tmp_path / "c.json"), "--skip-models", "kimi-k2.5"])
    assert "== development part: 0 points priced" in by_model


def test_the_points_are_priced_with_the_moe_terms_where_the_fit_reaches_as_for_a_user():
    # Qwen3-235B on an H100 is neither a family nor a system of TensorRT-LLM's fit (predict.fit_reach): the
    # closed-loop points price it without the MoE terms, as `servelab estimate` does; fitting (no record of
    # the fit's rows) prices every row with them
    cal = read_calibration(shipped_calibration())
    params = dict(cal.engines["trtllm"].params)
    points, _ = read_points(DATA, ("h100_sxm",))
    point = next(p for p in points if not p.heldout and p.case.model.name == "qwen3-235b-a22b")
    system = load_system("h100_sxm")
    as_for_a_user = Pricer(system, "aggregated", moe_fits=cal.moe_fits()).estimate(point.case, params)
    without = Pricer(system, "aggregated").estimate(point.case, params | dict.fromkeys(MOE_TERMS, 0.0))
    as_fitted = Pricer(system, "aggregated").estimate(point.case, params)
    assert as_for_a_user.percentiles == without.percentiles
    assert as_fitted.tpot_ms > as_for_a_user.tpot_ms


def test_the_gap_analysis_script_counts_the_copies_and_tables_two_priced_parts(tmp_path):
    # priced files of the development part's Qwen3.5 and Kimi-K2.5 points: "before" at their measured values,
    # "after" at twice them, so every group reads 0.0 % (1.00x) before and 100.0 % (2.00x) after
    points, _ = read_points(DATA, ("b200_sxm", "b300_sxm", "h200_sxm"))
    models = ("qwen3.5-397b-a17b", "kimi-k2.5")
    dev = [p for p in points if not p.heldout and p.case.model.name in models]

    def priced(scale: float) -> dict:
        ttft, tpot = ({p.key: scale * getattr(p.case, f) for p in dev} for f in ("ttft_ms", "tpot_ms"))
        got = {k: {"ttft_p50": ttft[k], "ttft_mean": ttft[k], "tpot_p50": tpot[k]} for k in ttft}
        return {"fingerprint": "test", "points": got}

    for name, scale in (("before", 1.0), ("after", 2.0)):
        (tmp_path / f"{name}.json").write_text(json.dumps(priced(scale)))
    script = str(ROOT / "accuracy" / "gap_analysis_rows.py")
    args = [script, "--before", str(tmp_path / "before.json"), "--after", str(tmp_path / "after.json")]
    out = run_accuracy_python(args)
    # the copies with an InferenceX row beside them are left out as duplicates (calibrate/rows.py)
    assert "qwen3.5-397b-a17b: 7 points of its gap-analysis file, 0 with an InferenceX row" in out
    rows = [line for line in out.splitlines() if line.startswith(("| qwen3.5", "| kimi"))]
    assert len(rows) == 7  # by model, system and rows (the file's or InferenceX's own)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[4:8] == ["0.0% (1.00x)", "100.0% (2.00x)", "0.0% (1.00x)", "100.0% (2.00x)"]
        assert cells[8] == "100% / 0%"
    # a priced file without these points is refused in one line
    (tmp_path / "empty.json").write_text(json.dumps({"fingerprint": "test", "points": {}}))
    args[2] = str(tmp_path / "empty.json")
    err = run_accuracy_python(args, returncode=2)
    assert err.startswith("error: ") and "not priced in both files" in err and len(err.splitlines()) == 1
