"""`--calibration FILE` on estimate, plan and bench --simulate: the file's fitted engine overheads price the
answer, the answer names the file, and a bad file is one line with exit code 2."""

import json

import pytest
from clirun import servelab

from servelab.calibrate.calibration_file import FORMAT, engine_entries
from servelab.calibrate.price import defaults
from servelab.predict.engines import engine_profile
from servelab.specs import load_model

SLOW_STEP_US = 20000.0  # a step overhead far above the shipped fit: TPOT must grow by about this much


def run(*args, cwd=None):
    return servelab(*args, cwd=cwd)


@pytest.fixture
def slow_calibration(tmp_path):
    path = tmp_path / "slow-vllm.json"
    # the documented profile with only its step overhead raised far above any fit
    params = defaults()["vllm"] | {"step_overhead_us": SLOW_STEP_US}
    path.write_text(
        json.dumps(
            {"calibration_format": 2, "_provenance": "test fit", "engines": {"vllm": {"params": params}}}
        )
    )
    return path


def test_estimate_takes_a_calibration(slow_calibration):
    args = ("estimate", "llama-3.1-8b", "--batch", "4", "--isl", "512", "--osl", "64", "--json")
    shipped = json.loads(run(*args).stdout)
    slow = json.loads(run(*args, "--calibration", str(slow_calibration)).stdout)
    assert slow["tpot_ms"] - shipped["tpot_ms"] > 0.9 * SLOW_STEP_US / 1000
    assert "slow-vllm.json: test fit" in slow["provenance"]["engine"]
    assert "calibrated.json" in shipped["provenance"]["engine"]


def test_plan_takes_a_calibration(slow_calibration):
    args = ("plan", "llama-3.1-8b", "--gpus", "1", "--mode", "agg", "--isl", "1024", "--osl", "128")
    args += ("--no-sla", "--json")
    shipped = json.loads(run(*args).stdout)
    slow = json.loads(run(*args, "--calibration", str(slow_calibration)).stdout)
    assert slow["engine"]["step_overhead_us"] == SLOW_STEP_US
    assert "slow-vllm.json" in slow["engine"]["source"]
    best = {c["concurrency"]: c["tpot_ms"] for c in shipped["candidates"]}
    for c in slow["candidates"]:
        if c["concurrency"] in best:
            assert c["tpot_ms"] > best[c["concurrency"]] + 0.9 * SLOW_STEP_US / 1000


def test_bench_simulate_takes_a_calibration(slow_calibration, tmp_path):
    args = ["bench", "--simulate", "--model", "llama-3.1-8b", "--system", "h200_sxm", "--dataset-name"]
    args += ["random", "--random-input-len", "256", "--random-output-len", "32", "--num-prompts", "8"]
    args += ["--max-concurrency", "4", "--save-result", "--result-dir", str(tmp_path)]
    for name, extra in (("shipped.json", []), ("slow.json", ["--calibration", str(slow_calibration)])):
        r = run(*args, "--result-filename", name, *extra)
        assert r.returncode == 0, r.stderr
    shipped = json.loads((tmp_path / "shipped.json").read_text())
    slow = json.loads((tmp_path / "slow.json").read_text())
    assert slow["median_tpot_ms"] - shipped["median_tpot_ms"] > 0.9 * SLOW_STEP_US / 1000
    assert "slow-vllm.json" in slow["prediction"]["engine_profile"]


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "not JSON"),
        ('{"engines": {"vllm": {"params": {"step_overhead_us": -1}}}}', "negative or nan"),
        ('{"engines": {"vllm": {"params": {"typo_us": 1}}}}', "unknown parameters"),
        ('{"engines": {"nginx": {"params": {}}}}', "unknown engine nginx"),
        ('{"calibration_format": 99, "engines": {}}', "calibration_format 99"),
        ('{"errors": {}}', "engines"),
    ],
)
def test_a_bad_calibration_file_is_one_line(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    r = run("estimate", "llama-3.1-8b", "--calibration", str(path))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "--calibration" in r.stderr and message in r.stderr


def test_plan_refuses_a_missing_calibration_file(tmp_path):
    r = run("plan", "llama-3.1-8b", "--gpus", "1", "--calibration", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--calibration" in r.stderr


MOE_COST_US = 2.0


def calibration_with(tmp_path, name, **extra):
    """A calibration file as `servelab calibrate engines` writes it: vLLM's documented parameters + extra."""
    path = tmp_path / name
    entries = engine_entries({"vllm": defaults()["vllm"] | extra}, [], with_proposed_terms=False)
    engines = {e: fit.model_dump() for e, fit in entries.items()}
    path.write_text(json.dumps({"calibration_format": FORMAT, "_provenance": "test fit", "engines": engines}))
    return path


def test_a_calibrated_moe_prompt_cost_prices_moe_prompts_only(tmp_path):
    without = calibration_with(tmp_path, "plain.json")
    moe_cost = calibration_with(tmp_path, "moe.json", moe_prompt_token_us=MOE_COST_US)
    assert engine_profile("vllm", calibration=moe_cost).moe_prompt_token_us == MOE_COST_US  # round trip
    assert engine_profile("vllm", calibration=without).moe_prompt_token_us == 0.0
    for model, layers in (("qwen3-30b-a3b", load_model("qwen3-30b-a3b").num_moe_layers), ("llama-3.1-8b", 0)):
        args = ("estimate", model, "--batch", "2", "--isl", "1000", "--osl", "16", "--json")
        a = json.loads(run(*args, "--calibration", str(without)).stdout)
        b = json.loads(run(*args, "--calibration", str(moe_cost)).stdout)
        # static mode: TTFT is one prefill of the batch's two prompts
        assert b["ttft_ms"] - a["ttft_ms"] == pytest.approx(2 * 1000 * layers * MOE_COST_US / 1000, abs=1e-3)
        assert b["tpot_ms"] == a["tpot_ms"]
