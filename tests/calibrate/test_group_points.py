"""accuracy/group_points.py: one group's development points, measured against the twin, one a line."""

import csv
import json
from pathlib import Path

import pytest

from tests.accuracy_python import ACCURACY, run_accuracy_python

SCRIPT = str(ACCURACY / "group_points.py")
DATA = Path(__file__).resolve().parents[1] / "data" / "closed_loop"
GROUP = ["--system", "b200_sxm", "--engine", "vllm", "--family", "llama"]
# two development points of the group (B200 vLLM Llama-3.3-70B FP8, 2025-10-29)
TP1_C64 = "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_8192x1024_c64_tp1_ep1_486"
TP8_C4 = "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x1024_c4_tp8_ep1_581"


def measured(row_id: str) -> tuple[float, float]:
    with open(DATA / "aiconfigurator" / "silicon_sample_rows.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["id"] == row_id)
    return float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])


@pytest.mark.slow  # reads every pinned point in a process of its own
def test_each_priced_point_of_the_group_is_a_line_with_its_ratios(tmp_path):
    priced = tmp_path / "dev.json"
    twin = {"ttft_mean": 1000.0, "ttft_p50": 1.0, "tpot_p50": 20.0}  # a silicon row: the twin's mean
    priced.write_text(json.dumps({"points": {TP1_C64: twin, TP8_C4: twin}}))
    out = run_accuracy_python([SCRIPT, "--priced", str(priced), *GROUP]).splitlines()
    rows = [line.split() for line in out[1:]]
    assert [(r[0], r[1], r[2]) for r in rows] == [("1", "8192/1024", "64"), ("8", "1024/1024", "4")]
    for row, row_id in zip(rows, (TP1_C64, TP8_C4), strict=True):
        ttft, tpot = measured(row_id)
        assert row[3] == "fp8" and float(row[4]) == round(ttft, 1)
        assert float(row[6]) == round(ttft / 1000.0, 2) and float(row[7]) == round(ttft - 1000.0, 1)
        assert float(row[8]) == round(tpot / 20.0, 2)


def test_a_priced_file_it_cannot_read_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    err = run_accuracy_python([SCRIPT, "--priced", str(bad), *GROUP], returncode=2)
    assert err.count("\n") == 1 and "--priced" in err and "closed_loop.py" in err
