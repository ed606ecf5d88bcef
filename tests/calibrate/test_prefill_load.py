"""accuracy/prefill_load.py: the prefill load a silicon row's own figures imply (a lower bound on the GPUs'
time its prompts need, by Little's law and the GPU's fastest measured GEMM rate), and the twin's replay of the
row with one thing changed."""

import csv
import json
from pathlib import Path

import pytest
from accuracy_python import ACCURACY, run_accuracy_python
from silicon_csv import silicon_row

from servelab.specs import load_system

TOOL = str(ACCURACY / "prefill_load.py")
FP8_8B = "nvidia/Llama-3.1-8B-Instruct-FP8"
# Llama-3.1-8B's GEMM weights a prompt token touches (config.json: 32 layers, hidden 4,096, 32 query and 8 KV
# heads of 128, MLP 14,336): q, k, v and o projections and the gate, up and down projections
LLAMA_8B_GEMM_WEIGHTS = 32 * (4096 * (4096 + 2 * 8 * 128) + 4096 * 4096 + 3 * 4096 * 14336)


def vllm_8b_row(i: int, ttft: str, tpot: str) -> dict:
    """One of vLLM 0.12's rows of the FP8 8B on one H200 as AIConfigurator's sample writes them: 64 clients of
    2,000 + 100 tokens, with the given measured TTFT and TPOT."""
    row = silicon_row(i, "vllm", FP8_8B, ttft, tpot, "0.12.0", "test; silicon_concurrency=64")
    row.update(
        tp_size="1", moe_tp_size="1", gemm_quant_mode="fp8", moe_quant_mode="fp8", isl="2000", osl="100"
    )
    row.update(batch_size="64")
    return row


def write_csv(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows(rows)
    return path


def run(tmp_path: Path, rows: list[dict], *extra: str) -> list[dict]:
    sample = write_csv(tmp_path / "silicon_sample.csv", rows)
    out = tmp_path / "rows.json"
    run_accuracy_python([TOOL, "--csv", str(sample), "--json", str(out), *extra])
    return {r["id"]: r for r in json.loads(out.read_text())}


def test_the_load_is_the_prompts_gemm_work_by_littles_law_over_the_gpus_fastest_gemm(tmp_path):
    """vLLM's measured 121.73 ms / 9.74 ms (AIConfigurator's row) would need more FP8 GEMM work per second
    than the H200's fastest measured rate; with a TPOT of 26 ms (the twin's at that load) it would not."""
    rows = run(tmp_path, [vllm_8b_row(0, "121.73", "9.74"), vllm_8b_row(1, "121.73", "26.0")], "--loads-only")
    measured = load_system("h200_sxm").measured
    fastest_fp8 = max(measured["gemm_fp8_tflops"].value, measured["gemm_fp8_rowwise_tflops"].value)
    for row_id, tpot in (("row0", 9.74), ("row1", 26.0)):
        requests_per_s = 64 / ((121.73 + 99 * tpot) / 1000)
        expected = requests_per_s * 2000 * 2 * LLAMA_8B_GEMM_WEIGHTS / (fastest_fp8 * 1e12)
        assert rows[row_id]["prefill_load"] == pytest.approx(expected, rel=1e-9)
    assert rows["row0"]["prefill_load"] > 1.2 and rows["row1"]["prefill_load"] < 0.55
    assert "twin" not in rows["row0"]


@pytest.mark.slow  # the twin's replay of one row twelve times
def test_fewer_clients_or_cached_prompts_shorten_the_twins_tpot_of_a_prefill_heavy_row(tmp_path):
    twin = run(tmp_path, [vllm_8b_row(0, "121.73", "9.74")])["row0"]["twin"]
    nominal = twin["nominal"]
    # a steady closed loop of 64 clients prefilling 2,000 tokens a request: most of a step is prefill
    assert nominal["tpot_ms"] > 2 * 9.74
    # AIConfigurator's launch (a budget of 64 + 2,000 + 1,500 tokens, not 8,192) spreads the same prefill
    # work over more steps: the TPOT stays
    assert twin["aic_launch"]["tpot_ms"] == pytest.approx(nominal["tpot_ms"], rel=0.05)
    # the nearest what-ifs leave less prefill per decode step, and so shorter steps
    assert twin["clients"]["value"] < 1 and twin["clients"]["tpot_ms"] < 0.6 * nominal["tpot_ms"]
    assert twin["prefix_hit"]["value"] > 0 and twin["prefix_hit"]["tpot_ms"] < nominal["tpot_ms"]
    assert twin["output"]["value"] > 1 and twin["output"]["tpot_ms"] < nominal["tpot_ms"]


def test_a_missing_sample_is_one_line_and_exit_2(tmp_path):
    err = run_accuracy_python([TOOL, "--csv", str(tmp_path / "none.csv")], returncode=2)
    assert err.count("\n") == 1 and "none.csv" in err and "Traceback" not in err
