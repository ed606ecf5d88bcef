"""accuracy/twin_vs_vllm_cpu.py prices the twin with a CPU profile fitted to vLLM's own steps: the twin takes
the fitted system and, through a calibration file, the fitted engine profile, and replays the request stream
the real client sends for the same flags. Run here with --reprice on given measurements: no vLLM, no
timing."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.bench.config import BenchConfig
from servelab.bench.runner import prepare
from servelab.predict.engines import engine_profile

ACCURACY = Path(__file__).resolve().parents[2] / "accuracy"
SCRIPT = ACCURACY / "twin_vs_vllm_cpu.py"
# run 5 of docs/accuracy.md, section 3, as measured: its step costs and the profile fitted to them then
RUN5 = ACCURACY / "results" / "twin_vs_vllm_cpu_avx2_run5.json"
# the e2e tests' tiny Llama (servelab.runner.tiny_llama), its config only: the twin needs no weights
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": 4096,
    "vocab_size": 458,
    "tie_word_embeddings": False,
    "dtype": "float32",
}
POINT = {"clients": 4, "isl": 128, "osl": 64, "num_prompts": 16, "seed": 3}


@pytest.fixture
def model_dir(tmp_path) -> Path:
    d = tmp_path / "tiny-llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY_LLAMA))
    return d


def client_stream(seed: int) -> tuple[list[int], list[int]]:
    """The lengths the real client's random dataset draws for the point's flags."""
    cfg = BenchConfig(
        model="tiny-llama",
        random_input_len=POINT["isl"],
        random_output_len=POINT["osl"],
        random_range_ratio=0.2,
        num_prompts=POINT["num_prompts"],
        max_concurrency=POINT["clients"],
        seed=seed,
    )
    items = prepare(cfg, None).data.items
    return [it.prompt_len for it in items], [it.output_len for it in items]


def measurements(step_overhead_us: float = 600.0, lengths_seed: int = POINT["seed"]) -> dict:
    """What a measured run saves: fitted profile, step costs, and per run the metrics, the engine's own means
    and the lengths the server counted (values made up: the twin is what is checked)."""
    ins, outs = client_stream(lengths_seed)
    runs = [
        {
            "median_ttft_ms": 4.0 * k,
            "p90_ttft_ms": 6.0 * k,
            "p99_ttft_ms": 8.0 * k,
            "median_tpot_ms": 1.0 * k,
            "p90_tpot_ms": 1.5 * k,
            "median_itl_ms": 1.0 * k,
            "duration": 0.5 * k,
            "engine_side": {"ttft_ms": 4.0 * k, "tpot_ms": 1.2 * k, "concurrency": 3.5},
            "one_read_requests": 0,
            "loadavg_1m": [1.0, 1.0],
            "input_lens": ins,
            "output_lens": outs,
        }
        for k in (1, 2, 3)
    ]
    return {
        "model_name": "tiny-llama",
        "wall_s": 1.0,
        "loadavg_start": [1.0, 1.0, 1.0],
        "loadavg_end": [1.0, 1.0, 1.0],
        "cpus": 2,
        "runs_per_point": 3,
        "step_costs": {"prefill_ms": {}, "decode_ms": {}, "http_ms": 8.0, "frontend_ms": 5.0},
        "profile": {
            "bf16_tflops": 0.2,
            "step_overhead_us": step_overhead_us,
            "per_seq_overhead_us": 6.0,
            "prompt_step_us_per_op": 90.0,
            "http_ms": 3.0,
            "frontend_ms": 1.0,
            "fit_error": 0.1,
        },
        "points": [{**POINT, "runs": runs}],
        "result_dir": "unused",
    }


def reprice(tmp_path: Path, model_dir: Path, measured: dict, name: str, *extra: str) -> tuple[dict, dict]:
    """Run the script's --reprice; its comparison and the twin's result file."""
    (tmp_path / f"{name}-in.json").write_text(json.dumps(measured))
    cmd = [sys.executable, str(SCRIPT), "--reprice", str(tmp_path / f"{name}-in.json"), *extra]
    cmd += [
        "--model-dir",
        str(model_dir),
        "--out-dir",
        str(tmp_path / name),
        "--json",
        str(tmp_path / f"{name}.json"),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "| 4 | 128/64 | median_ttft (ms) |" in p.stdout
    twin = json.loads((tmp_path / name / "twin-c4-128-64.json").read_text())
    return json.loads((tmp_path / f"{name}.json").read_text()), twin


@pytest.mark.slow  # 2.2 s of CPU a case: CLI processes fitting and replaying a CPU profile
def test_the_twin_is_priced_by_the_fitted_system_and_engine(tmp_path, model_dir):
    result, twin = reprice(tmp_path, model_dir, measurements(), "fast")
    assert twin["deployment"]["system"] == "cpu_2core_vllm"
    assert twin["deployment"]["max_num_seqs"] == 16 and twin["deployment"]["max_num_batched_tokens"] == 2048
    assert "cpu-calibration.json" in twin["prediction"]["engine_profile"]  # the fitted overheads priced it
    assert set(twin["prediction"]["ops_by_source"]) == {"roofline"}  # no GPU table prices a CPU
    assert twin["completed"] == POINT["num_prompts"]
    _, slow = reprice(tmp_path, model_dir, measurements(step_overhead_us=1200.0), "slow")
    for key in ("median_tpot_ms", "median_ttft_ms", "duration"):  # a slower fitted step, a slower twin
        assert slow[key] > twin[key], key
    for metric, row in result["points"][0]["metrics"].items():  # the verdict reads the measured spread
        assert row["twin"] == twin[metric]
        assert (row["verdict"] == "inside") == (row["min"] <= row["twin"] <= row["max"]), metric
    # the measured front-end paths are added less what the twin prices of them itself (vLLM's documented
    # API-server costs for a lone request of the point's prompt length, and its serial queue's handling of
    # the step with its first token): counted once, not twice
    vllm = engine_profile("vllm")
    assert vllm.policy.serial_output_stream
    intake_us = vllm.api_request_us + vllm.api_prompt_token_us * POINT["isl"]
    priced_ms = (intake_us + vllm.api_output_token_us + vllm.api_chunk_us + vllm.api_step_us) / 1000.0
    assert 0.0 < priced_ms < 5.0
    point = result["points"][0]
    assert point["engine_vs_twin"]["ttft_ms"]["twin"] == pytest.approx(twin["mean_ttft_ms"] + 5.0 - priced_ms)
    assert point["metrics"]["median_ttft_ms"]["twin_plus_http"] == pytest.approx(
        twin["median_ttft_ms"] + 8.0 - priced_ms
    )


@pytest.mark.slow  # 2.2 s of CPU a case: CLI processes fitting and replaying a CPU profile
def test_the_twin_replays_the_real_clients_stream(tmp_path, model_dir):
    result, twin = reprice(tmp_path, model_dir, measurements(), "same")
    assert result["points"][0]["same_lengths"]
    assert (twin["input_lens"], twin["output_lens"]) == client_stream(POINT["seed"])
    assert len(set(twin["input_lens"])) > 1  # range ratio 0.2 varies them
    other, _ = reprice(tmp_path, model_dir, measurements(lengths_seed=POINT["seed"] + 1), "other")
    assert not other["points"][0]["same_lengths"]  # the check can fail


@pytest.mark.slow  # 3.8 s of CPU a case: CLI processes fitting and replaying a CPU profile
def test_refit_fits_the_profile_again_to_the_saved_step_costs(tmp_path, model_dir):
    saved = json.loads(RUN5.read_text())
    # as measured: a GPU roofline (128-wide GEMM tiles, one rate for attention and GEMMs) could not follow
    # this AVX2 machine's steps
    assert "attention_tflops" not in saved["profile"] and saved["profile"]["fit_error"] > 0.2
    result, twin = reprice(tmp_path, model_dir, saved, "refit", "--refit")
    profile = result["profile"]
    assert result["step_costs"] == saved["step_costs"]
    assert profile["fit_error"] < 0.05  # a CPU's roofline follows them
    assert profile["attention_tflops"] > 2 * profile["bf16_tflops"]  # vLLM's CPU attention outruns its GEMMs
    kept, kept_twin = reprice(tmp_path, model_dir, saved, "kept")
    assert kept["profile"] == saved["profile"]  # without --refit the saved profile prices the twin
    assert twin["median_tpot_ms"] != kept_twin["median_tpot_ms"]


@pytest.mark.slow  # 1.0 s of CPU a case: CLI processes fitting and replaying a CPU profile
def test_refit_needs_a_saved_run(tmp_path):
    p = subprocess.run(
        [sys.executable, str(SCRIPT), "--refit", "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "--refit refits a saved run: it needs --reprice" in p.stderr


def test_reprice_needs_the_model_dir(tmp_path):
    p = subprocess.run(
        [sys.executable, str(SCRIPT), "--reprice", str(tmp_path / "x.json"), "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "--reprice needs --model-dir" in p.stderr
