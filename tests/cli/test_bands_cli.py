"""The claimed band where figures are shown: `servelab estimate` (table and --json), `plan` and the twin say
what their band claims and where it came from; a prediction the residuals do not describe (static mode, the
torch backend) claims nothing; a bad residuals file is one line."""

import json
import math
import shutil

import pytest
from clirun import servelab

from servelab.predict.bands import residuals_path
from servelab.predict.engines import shipped_calibration

AGG = ("estimate", "llama-3.1-8b", "--batch", "4", "--isl", "512", "--osl", "64", "--mode", "agg")
TTFT_Q, TPOT_Q = (-0.5, 0.25), (-0.1, 0.2)  # the synthetic residuals' 10th and 90th percentiles
SPAN = (1, 1024)  # the rows' concurrency, and their lengths 256 and 32 times it: llama on h200_sxm


@pytest.fixture
def calibration(tmp_path):
    """The shipped calibration, with a residuals file beside it whose vLLM quantiles are known."""
    path = tmp_path / "cal.json"
    shutil.copy(shipped_calibration(), path)
    rows = []
    for k in range(41):  # residuals spread evenly over [2 q_lo - q_hi ..]: 10th / 90th percentiles known
        f = k / 40
        t = TTFT_Q[0] + (f - 0.1) / 0.8 * (TTFT_Q[1] - TTFT_Q[0])
        d = TPOT_Q[0] + (f - 0.1) / 0.8 * (TPOT_Q[1] - TPOT_Q[0])
        rows.append(
            {"engine": "vllm", "family": "llama", "ttft_ms": 100 * math.exp(t), "tpot_ms": 10 * math.exp(d)}
            | {"pred_ttft_ms": 100.0, "pred_tpot_ms": 10.0}
            | {"concurrency": SPAN[k % 2], "isl": 256 * SPAN[k % 2], "osl": 32 * SPAN[k % 2]}
        )
    doc = {"residuals_format": 1, "provenance": {"settings": {"system": "h200_sxm"}}, "rows": rows}
    residuals_path(path).write_text(json.dumps(doc))
    return path


def test_estimate_json_carries_the_claimed_band(calibration):
    data = json.loads(servelab(*AGG, "--json", "--calibration", str(calibration)).stdout)
    band = data["band"]
    assert band["claim"] == 0.8
    assert data["ttft_ms_low"] == pytest.approx(data["ttft_ms"] * math.exp(TTFT_Q[0]))
    assert data["ttft_ms_high"] == pytest.approx(data["ttft_ms"] * math.exp(TTFT_Q[1]))
    assert data["tpot_ms_low"] == pytest.approx(data["tpot_ms"] * math.exp(TPOT_Q[0]))
    assert band["ttft_ms"]["source"] == "80 % band, LOFO residuals of 41 rows, vllm"
    lo, hi = data["kernel_band"]["ttft_ms"]
    assert lo <= data["ttft_ms"] <= hi  # the kernel-source band is kept apart


def test_estimate_table_says_the_claim_and_its_source(calibration):
    r = servelab(*AGG, "--calibration", str(calibration))
    assert r.returncode == 0, r.stderr
    assert "80 % band, LOFO residuals of 41 rows, vllm" in " ".join(r.stdout.split())


def test_static_mode_and_torch_claim_nothing(calibration):
    static = json.loads(servelab(*AGG[:-2], "--json", "--calibration", str(calibration)).stdout)
    assert static["band"]["claim"] is None and "static mode" in static["band"]["source"]
    assert [static["ttft_ms_low"], static["ttft_ms_high"]] == static["kernel_band"]["ttft_ms"]
    torch = json.loads(
        servelab(*AGG, "--backend", "torch", "--json", "--calibration", str(calibration)).stdout
    )
    assert torch["band"]["claim"] is None and "no residuals describe torch" in torch["band"]["source"]


def test_plan_candidates_carry_the_claim(calibration):
    args = ("plan", "llama-3.1-8b", "--gpus", "1", "--mode", "agg", "--isl", "1024", "--osl", "128")
    data = json.loads(servelab(*args, "--no-sla", "--json", "--calibration", str(calibration)).stdout)
    c = data["candidates"][0]
    assert c["band"]["claim"] == 0.8
    assert c["ttft_ms_low"] == pytest.approx(c["ttft_ms"] * math.exp(TTFT_Q[0]))
    # the output rate goes as 1 / TPOT: the TPOT band's high end is the throughput's low end
    assert c["tok_s_per_gpu_low"] == pytest.approx(c["tok_s_per_gpu"] * math.exp(-TPOT_Q[1]))
    assert any("TTFT 80 % band, LOFO residuals of 41 rows, vllm" in n for n in data["notes"])


def test_plan_candidates_outside_the_rows_claim_nothing(calibration):
    args = ("plan", "llama-3.1-8b", "--gpus", "1", "--mode", "agg", "--isl", "1024", "--osl", "128")
    args += ("--system", "b200_sxm", "--no-sla", "--json", "--calibration", str(calibration))
    data = json.loads(servelab(*args).stdout)
    c = data["candidates"][0]
    assert c["band"]["claim"] is None and "system b200_sxm, the rows' h200_sxm" in c["band"]["source"]
    assert [c["ttft_ms_low"], c["ttft_ms_high"]] == c["kernel_band"]["ttft_ms"]
    assert any(f"for candidates {c['rank']}" in n and "system b200_sxm" in n for n in data["notes"])


def test_the_twin_says_its_band(calibration, tmp_path):
    args = ["bench", "--simulate", "--model", "llama-3.1-8b", "--system", "h200_sxm", "--dataset-name"]
    args += ["random", "--random-input-len", "256", "--random-output-len", "32", "--num-prompts", "8"]
    args += ["--max-concurrency", "4", "--calibration", str(calibration)]
    r = servelab(*args)
    assert r.returncode == 0, r.stderr
    assert "band (80 %) of the median TTFT and TPOT" in r.stdout
    assert "LOFO residuals of 41 rows, vllm" in r.stdout
    # 2,048 in flight: more than the rows' 1,024, so the twin claims nothing and says why
    longer = [*args[:-4], "--max-concurrency", "2048", "--num-prompts", "2048", *args[-2:]]
    r = servelab(*longer)
    assert r.returncode == 0, r.stderr
    said = " ".join(r.stdout.split())
    assert "band: kernel-source band" in said and "concurrency 2048, the rows' 1-1024" in said


def test_outside_the_rows_no_claim_and_why(calibration):
    other_gpu = json.loads(
        servelab(*AGG, "--system", "b200_sxm", "--json", "--calibration", str(calibration)).stdout
    )
    assert other_gpu["band"]["claim"] is None
    assert (
        "outside the residual rows' distribution: system b200_sxm, the rows' h200_sxm"
        in other_gpu["band"]["source"]
    )
    assert [other_gpu["ttft_ms_low"], other_gpu["ttft_ms_high"]] == other_gpu["kernel_band"]["ttft_ms"]
    other_family = servelab("estimate", "qwen3-32b", *AGG[2:], "--calibration", str(calibration))
    assert other_family.returncode == 0, other_family.stderr
    assert "model family qwen, the rows' llama" in " ".join(other_family.stdout.split())


def test_a_bad_residuals_file_is_one_line(calibration):
    doc = {"provenance": {"settings": {"system": "h200_sxm"}}, "rows": [{"engine": "vllm"}]}
    residuals_path(calibration).write_text(json.dumps(doc))
    r = servelab(*AGG, "--calibration", str(calibration))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "cal.residuals.json" in r.stderr and "rows[0]" in r.stderr
