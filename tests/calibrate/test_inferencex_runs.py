"""Tying calibration rows to the InferenceX run that measured them: an exact time names the changelog run
started within a minute before it whose search space holds the row's load; a date-only row is decided by an
exact row of the same measurement, else by its day's runs agreeing on speculative decoding, else it is
ambiguous; the calibration leaves MTP runs' rows out with the run's commit as the reason and records the tie
of the rows it keeps."""

from datetime import UTC, datetime

import pytest
from silicon_csv import silicon_row

from servelab.calibrate import inferencex_runs
from servelab.calibrate.inferencex_runs import KeyRun, find_run, model_key, parse_measured, tie_rows
from servelab.calibrate.rows import build_cases

R1 = "deepseek-ai/DeepSeek-R1"


def _row(i: int, engine: str, measured: str, ttft: str, tpot: str, checkpoint: str = R1) -> dict:
    source = f"test; silicon_concurrency=4; measured={measured}"
    return silicon_row(i, engine, checkpoint, ttft, tpot, "1.1.0rc2.post2", source)


def test_checkpoint_names_of_one_model_agree():
    assert model_key("nvidia/DeepSeek-R1-0528-FP4-V2") == model_key(R1) == "deepseek-r1"
    assert model_key("deepseek-ai/DeepSeek-V3") == "deepseek-r1"  # the database dump's name for R1 runs
    assert model_key("zai-org/GLM-5-FP8") == model_key("zhipuai/GLM-5")
    assert model_key("Qwen/Qwen3.5-397B-A17B-FP8") != model_key("Qwen/Qwen3-235B-A22B-FP8")


def test_measured_values_exact_or_date_only():
    assert parse_measured("2026-01-14T22:26:21Z") == (
        datetime(2026, 1, 14, 22, 26, 21, tzinfo=UTC),
        "2026-01-14",
    )
    assert parse_measured("2026-01-14T00:00:00.000Z") == (None, "2026-01-14")
    assert parse_measured("") == (None, "")


def test_an_exact_time_names_the_changelog_run_of_the_pinned_table():
    tie = find_run("trtllm", "h200_sxm", R1, "fp8", "2026-01-14T22:26:21Z")
    assert (tie.status, tie.commits, tie.spec_decoding) == ("identified", "bf3456727", "mtp")
    assert [r.key for r in tie.runs] == ["dsr1-fp8-h200-trt-mtp"]
    # the same time on other hardware, or a minute and more later, is no run of this deployment
    assert find_run("trtllm", "h100_sxm", R1, "fp8", "2026-01-14T22:26:21Z").status == "none"
    assert find_run("trtllm", "h200_sxm", R1, "fp8", "2026-01-14T22:27:30Z").status == "none"
    # a full sweep ran the deployment's plain and MTP keys at once: which one a row is, is not known
    both = find_run("trtllm", "h200_sxm", R1, "fp8", "2026-01-28T06:18:44Z")
    assert (both.status, both.spec_decoding) == ("ambiguous", None)
    assert sorted(r.key for r in both.runs) == ["dsr1-fp8-h200-trt", "dsr1-fp8-h200-trt-mtp"]
    # only the MTP key's search space held 1k/8k at concurrency 256; neither held concurrency 4096
    at_256 = find_run("trtllm", "h200_sxm", R1, "fp8", "2026-01-28T06:18:44Z", load=(1024, 8192, 256))
    assert (at_256.status, at_256.spec_decoding) == ("identified", "mtp")
    assert [r.key for r in at_256.runs] == ["dsr1-fp8-h200-trt-mtp"]
    assert (
        find_run("trtllm", "h200_sxm", R1, "fp8", "2026-01-28T06:18:44Z", load=(1024, 8192, 4096)).status
        == "none"
    )


def _day_table():
    """Two runs of one deployment on one day, one MTP and one not."""
    deployment = ("trtllm", "h200_sxm", "deepseek-r1", "fp8")
    mtp = KeyRun("aaaaaaaaa", datetime(2026, 2, 1, 10, 0, 0, tzinfo=UTC), "dsr1-fp8-h200-trt-mtp", "mtp")
    plain = KeyRun("bbbbbbbbb", datetime(2026, 2, 1, 15, 0, 0, tzinfo=UTC), "dsr1-fp8-h200-trt", "none")
    return ((deployment, mtp), (deployment, plain))


def test_a_date_only_row_is_decided_by_its_exact_duplicate(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(inferencex_runs, "run_table", _day_table)
    alone = find_run("trtllm", "h200_sxm", R1, "fp8", "2026-02-01T00:00:00.000Z")
    assert alone.status == "ambiguous"
    rows = [
        _row(0, "trtllm", "2026-02-01T15:00:04Z", "260.123456789", "13.8"),
        _row(1, "trtllm", "2026-02-01T00:00:00.000Z", "260.1234568", "13.800000001"),  # row0, rounded
        _row(2, "trtllm", "2026-02-01T00:00:00.000Z", "250.0", "7.1"),  # no exact duplicate
    ]
    ties = tie_rows(rows)
    assert (ties["row1"].status, ties["row1"].commits, ties["row1"].spec_decoding) == (
        "identified",
        "bbbbbbbbb",
        "none",
    )
    assert ties["row2"].status == "ambiguous"


def test_a_date_only_row_whose_day_agrees_is_decided(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(inferencex_runs, "run_table", lambda: _day_table()[:1])
    tie = find_run("trtllm", "h200_sxm", "deepseek-ai/DeepSeek-V3", "fp8", "2026-02-01T00:00:00.000Z")
    assert (tie.status, tie.spec_decoding) == ("identified", "mtp")
    assert find_run("trtllm", "h200_sxm", R1, "fp8", "2026-02-02T00:00:00.000Z").status == "none"


def test_the_calibration_leaves_mtp_runs_out_and_records_the_run_of_the_rest():
    rows = [
        _row(0, "trtllm", "2026-01-14T22:26:21Z", "494.0", "8.6"),  # InferenceX #392's MTP run
        _row(1, "trtllm", "2026-01-14T00:00:00.000Z", "494.0", "8.6"),  # the same, date only
        _row(2, "trtllm", "2026-01-14T00:00:00.000Z", "455.0", "11.4"),  # that day's only run: MTP too
        _row(3, "trtllm", "2026-01-28T06:18:44Z", "377.8", "32.2"),  # plain or MTP: kept, ambiguous
        _row(4, "sglang", "2026-03-25T16:34:14Z", "300.0", "20.0"),  # a plain SGLang run
        _row(5, "trtllm", "2025-11-02T00:00:00.000Z", "600.0", "13.8"),  # before changelog runs
    ]
    cases, skipped = build_cases(rows, "h200_sxm")
    assert skipped == {"speculative decoding (MTP) run: InferenceX changelog bf3456727": 3}
    assert {c.row_id: c.run for c in cases} == {
        "row3": "ambiguous e28c038f8",
        "row4": "identified 12ba0ae07",
        "row5": "none",
    }
