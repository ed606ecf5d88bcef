"""accuracy/first_wave_stall.py: the stall of a first wave that a cold InferenceX row's excess TTFT implies,
on the development part's SGLang DeepSeek-R1 points on B200 measured before InferenceX's client warmed up."""

import csv
import json
from pathlib import Path

from tests.accuracy_python import ACCURACY, run_accuracy_python

SCRIPT = str(ACCURACY / "first_wave_stall.py")
DATA = Path(__file__).resolve().parents[1] / "data" / "closed_loop"
TWIN_MEAN_MS = 300.0


def measured_ttft(row_id: str) -> float:
    with open(DATA / "aiconfigurator" / "silicon_sample_rows.csv", newline="") as f:
        return next(float(r["silicon_ttft_ms"]) for r in csv.DictReader(f) if r["id"] == row_id)


def test_the_stall_is_the_excess_over_the_twin_times_the_requests_per_client(tmp_path):
    # every point priced at one twin mean: the script's excess and stall follow from the pinned measurements
    ids = [
        "dsr1_b200_sglang_fp4_agg_1024x1024_c32_cfg99",  # FP4: 10 requests a client, chunks of 16,384
        "dsr1_b200_sglang_fp4_agg_1024x1024_c16_cfg99",
        "dsr1_b200_sglang_fp8_agg_8192x1024_c8_cfg199",  # FP8: 50 a client at 1,024 output tokens, 32,768
        "dsr1_b200_sglang_fp4_agg_1024x1024_c32_cfg201",  # measured after the warm-up: not listed
    ]
    priced = tmp_path / "dev.json"
    priced.write_text(json.dumps({"points": {i: {"ttft_mean": TWIN_MEAN_MS} for i in ids}}))
    lines = run_accuracy_python([SCRIPT, "--priced", str(priced)]).splitlines()
    rows = [line.split(" | ") for line in lines if line.startswith("| FP")]
    assert [(r[1], r[2], r[3]) for r in rows] == [
        ("tp8", "1024/1024", "16"),
        ("tp8", "1024/1024", "32"),
        ("tp8-ep8", "8192/1024", "8"),
    ]
    c16, c32, fp8 = rows
    # 16 clients of at most 1,024 tokens fit one chunk; 32 do not, nor 8 of 8,192 in chunks of 32,768
    assert c16[4].endswith("<=") and c32[4].endswith(">") and fp8[4].endswith(">")
    for r, row_id, per_client in ((c32, ids[0], 10), (c16, ids[1], 10), (fp8, ids[2], 50)):
        excess = measured_ttft(row_id) - TWIN_MEAN_MS
        assert r[8] == f"{excess:,.0f}" and r[9] == f"{excess / 1e3 * per_client:.0f}"
    assert any(line.startswith("first wave over the chunk: 2 points") for line in lines)


def test_a_file_that_is_not_a_priced_dev_part_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    err = run_accuracy_python([SCRIPT, "--priced", str(bad)], returncode=2)
    assert err.startswith(f"error: --priced {bad}: expected") and len(err.strip().splitlines()) == 1
    none = tmp_path / "none.json"
    none.write_text(json.dumps({"points": {}}))
    err = run_accuracy_python([SCRIPT, "--priced", str(none)], returncode=2)
    assert "prices no cold SGLang point" in err and len(err.strip().splitlines()) == 1
