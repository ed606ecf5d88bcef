"""accuracy/twin_vs_vllm_cpu.py prices the twin with a CPU profile fitted to vLLM's own steps: the twin takes
a custom system and, through a calibration file, a custom engine profile, and replays the request stream the
real client sends with the script's flags. No vLLM and no timing here: the fitted values are given."""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.bench.runner import prepare
from servelab.predict.engines import engine_profile

ACCURACY = Path(__file__).resolve().parents[2] / "accuracy"
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


@pytest.fixture(scope="module")
def harness():
    sys.path.insert(0, str(ACCURACY))  # the script imports its sibling sim_vs_vllm_cpu.py, as when run
    try:
        return importlib.import_module("twin_vs_vllm_cpu")
    finally:
        sys.path.remove(str(ACCURACY))


@pytest.fixture
def model_dir(tmp_path) -> Path:
    d = tmp_path / "tiny-llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY_LLAMA))
    return d


def profile(harness, step_overhead_us: float = 600.0):
    return harness.CpuProfile(
        bf16_tflops=0.2,
        step_overhead_us=step_overhead_us,
        per_seq_overhead_us=6.0,
        prompt_step_us_per_op=90.0,
        http_ms=3.0,
        frontend_ms=1.0,
        fit_error=0.1,
    )


def test_the_calibration_file_prices_the_fitted_engine(harness, tmp_path):
    fitted = profile(harness)
    path = harness.write_calibration(fitted, tmp_path / "cal.json")
    s = harness.SETTINGS
    got = engine_profile(
        "vllm",
        calibration=path,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        chunked_prefill=s.chunked_prefill,
    )
    want = sys.modules["sim_vs_vllm_cpu"].cpu_engine(  # the profile the simulator check prices with
        fitted.step_overhead_us, fitted.per_seq_overhead_us, fitted.prompt_step_us_per_op
    )
    priced = ("step_overhead_us", "per_seq_overhead_us", "kernel_gap_us", "eager_launch_us")
    priced += ("max_num_batched_tokens", "max_num_seqs", "chunked_prefill")
    assert {k: getattr(got, k) for k in priced} == {k: getattr(want, k) for k in priced}
    # the fitted runner graphs every decode step; the shipped vLLM profile does up to the batches used here
    assert got.cuda_graph_max_batch >= s.max_num_seqs
    assert "cal.json" in got.source


def test_the_twin_takes_the_fitted_system_and_profile(harness, model_dir, tmp_path):
    cfg = harness.bench_config("tiny-llama", 4, 128, 64, 16, 0)
    runs = {}
    for overhead in (600.0, 1200.0):
        fitted = profile(harness, overhead)
        cal = harness.write_calibration(fitted, tmp_path / f"cal-{overhead:.0f}.json")
        runs[overhead] = harness.run_twin(model_dir, cfg, fitted, cal)
    fast, slow = runs[600.0], runs[1200.0]
    assert fast["deployment"]["system"] == "cpu_2core_vllm"
    assert fast["deployment"]["max_num_seqs"] == 16 and fast["deployment"]["max_num_batched_tokens"] == 2048
    assert "cal-600.json" in fast["prediction"]["engine_profile"]
    assert set(fast["prediction"]["ops_by_source"]) == {"roofline"}  # no GPU table prices a CPU
    assert fast["completed"] == 16
    # a slower fitted step is a slower twin: the profile really prices it
    for key in ("median_tpot_ms", "median_ttft_ms", "duration"):
        assert slow[key] > fast[key], key


def test_the_twin_replays_the_real_clients_stream(harness, model_dir, tmp_path, mock_server):
    cfg = harness.bench_config("mock", 4, 128, 64, 12, 3)
    twin = harness.run_twin(
        model_dir, cfg, profile(harness), harness.write_calibration(profile(harness), tmp_path / "c.json")
    )
    items = prepare(cfg, None).data.items  # the real client's dataset for these flags
    assert twin["input_lens"] == [it.prompt_len for it in items]
    assert twin["output_lens"] == [it.output_len for it in items]
    assert len(set(twin["input_lens"])) > 1  # range ratio 0.2 varies them
    # and the CLI flags the script sends make the real client draw the same stream
    s = mock_server("--token-delay-ms", "0")
    cmd = [sys.executable, "-m", "servelab.cli.main", "bench", "--base-url", s.url, "--model", "mock"]
    cmd += [*harness.cli_flags(cfg), "--save-result", "--save-detailed", "--result-dir", str(tmp_path)]
    cmd += ["--result-filename", "real.json", "--num-workers", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert p.returncode == 0, p.stderr[-2000:]
    real = json.loads((tmp_path / "real.json").read_text())
    assert real["output_lens"] == twin["output_lens"]
    assert real["config"]["random_range_ratio"] == cfg.random_range_ratio
    assert real["max_concurrency"] == 4 and real["completed"] == 12


@pytest.mark.parametrize(
    ("value", "want"),
    [(5.0, "inside"), (4.0, "inside"), (12.0, "x2.00 above"), (2.0, "x2.00 below"), (0.0, "below (twin 0)")],
)
def test_verdict_names_the_factor_outside_the_spread(harness, value, want):
    assert harness.verdict(value, 4.0, 6.0) == want


def test_the_engine_side_comparison_adds_the_front_end_to_ttft_only(harness):
    engine_side = [{"ttft_ms": 5.0, "tpot_ms": 1.5}, {"ttft_ms": 7.0, "tpot_ms": 1.7}]
    got = harness.engine_compare(engine_side, {"mean_ttft_ms": 4.0, "mean_tpot_ms": 2.0}, frontend_ms=2.0)
    assert got["ttft_ms"] == {"min": 5.0, "max": 7.0, "twin": 6.0, "verdict": "inside"}
    assert got["tpot_ms"]["twin"] == 2.0 and got["tpot_ms"]["verdict"] == "x1.18 above"
