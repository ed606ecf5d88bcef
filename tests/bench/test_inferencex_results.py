"""InferenceX's own result processing, run unchanged on servelab result files.

`tests/data/inferencex/utils/` pins InferenceX's `utils/process_result.py` and the power validation it imports
(`utils/aggregate_power.py`) at the commit and under the licence named in tests/data/inferencex/UPSTREAM.md
(refreshed by scripts/refresh_upstream_data.py). Each test runs a real `servelab bench` against the mock
server with the options InferenceX's `run_benchmark_serving` passes, then upstream's script on the result in a
subprocess of this Python, as InferenceX's workflow runs it (its environment names the job; a GPU metrics CSV
beside the result is its power telemetry), and checks the aggregate it writes against what its rules give
for that file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

UTILS = Path(__file__).resolve().parents[1] / "data" / "inferencex" / "utils"
PROCESS_RESULT = UTILS / "process_result.py"
CLI = [sys.executable, "-m", "servelab.cli.main", "bench"]
GPUS = 2
GPU_WATTS = (250.0, 350.0)  # the telemetry's constant draw of each GPU
# what InferenceX's benchmark template and launch script give process_result.py for a single-node job
JOB_ENV = {
    "RUNNER_TYPE": "h200",
    "FRAMEWORK": "vllm",
    "PRECISION": "fp8",
    "SPEC_DECODING": "none",
    "ISL": "64",
    "OSL": "16",
    "DISAGG": "false",
    "MODEL_PREFIX": "mock",
    "IMAGE": "vllm/vllm-openai:test",
    "RECIPE_FINGERPRINT": "sha256:" + "0" * 64,
    "TP": str(GPUS),
    "EP_SIZE": "1",
    "DP_ATTENTION": "false",
}


def inferencex_bench(server, out: Path, name: str, *args: str) -> dict:
    """`servelab bench` with the options InferenceX's run_benchmark_serving passes (benchmarks/
    benchmark_lib.sh): random prompts with InferenceX's length rule, closed loop, ignore-eos, 2 x conc
    warm-ups, e2el among the percentile metrics and its client's default percentiles (90, 99, 99.9)."""
    cmd = [
        *CLI,
        "--model",
        "mock",
        "--backend",
        "vllm",
        "--base-url",
        server.url,
        "--dataset-name",
        "random",
        "--random-input-len",
        JOB_ENV["ISL"],
        "--random-output-len",
        JOB_ENV["OSL"],
        "--random-range-ratio",
        "0.8",
        "--random-range-rule",
        "inferencex",
        "--num-prompts",
        "24",
        "--max-concurrency",
        "4",
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--save-result",
        "--num-warmups",
        "8",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "90,99,99.9",
        "--result-dir",
        str(out),
        "--result-filename",
        f"{name}.json",
        "--num-workers",
        "1",
        *args,
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads((out / f"{name}.json").read_text())


def write_telemetry(path: Path, start: float, end: float) -> None:
    """nvidia-smi's CSV (timestamp, GPU index, power draw), every GPU at a constant draw, sampled each second
    from 2 s before the window to 2 s after it."""
    lines = ["timestamp, index, power.draw [W]"]
    t = start - 2.0
    while t <= end + 2.0:
        lines += [f"{t:.3f}, {gpu}, {watts:.2f} W" for gpu, watts in enumerate(GPU_WATTS)]
        t += 1.0
    lines += [f"{end + 2.0:.3f}, {gpu}, {watts:.2f} W" for gpu, watts in enumerate(GPU_WATTS)]
    path.write_text("\n".join(lines) + "\n")


def process_result(work: Path, name: str, telemetry: Path | None) -> subprocess.CompletedProcess:
    """Upstream's script, unchanged, in `work` (where it reads NAME.json and writes agg_NAME.json); -B keeps
    its byte code out of the pinned folder."""
    env = {"PATH": os.environ.get("PATH", ""), "RESULT_FILENAME": name, **JOB_ENV}
    if telemetry is not None:
        env["GPU_METRICS_CSV"] = str(telemetry)
    return subprocess.run(
        [sys.executable, "-B", str(PROCESS_RESULT)], cwd=work, env=env, capture_output=True, text=True
    )


def upstream_rules(result: dict) -> dict:
    """What InferenceX's process_result.py derives from a result file, by its rules (read in the pinned
    script): the job's fields, throughput per GPU (tp x pp x pcp GPUs), every `*ms` field in seconds under
    the name less `_ms`, and every TPOT field's interactivity, 1000 / TPOT, under `intvty`."""
    out: dict = {
        "hw": JOB_ENV["RUNNER_TYPE"],
        "conc": int(result["max_concurrency"]),
        "image": JOB_ENV["IMAGE"],
        "model": result["model_id"],
        "infmax_model_prefix": JOB_ENV["MODEL_PREFIX"],
        "framework": JOB_ENV["FRAMEWORK"],
        "precision": JOB_ENV["PRECISION"],
        "spec_decoding": JOB_ENV["SPEC_DECODING"],
        "disagg": False,
        "recipe_fingerprint": JOB_ENV["RECIPE_FINGERPRINT"],
        "isl": int(JOB_ENV["ISL"]),
        "osl": int(JOB_ENV["OSL"]),
        "is_multinode": False,
        "tp": GPUS,
        "pp": 1,
        "dcp_size": 1,
        "pcp_size": 1,
        "ep": 1,
        "dp_attention": "false",
        "tput_per_gpu": result["total_token_throughput"] / GPUS,
        "output_tput_per_gpu": result["output_throughput"] / GPUS,
        "input_tput_per_gpu": (result["total_token_throughput"] - result["output_throughput"]) / GPUS,
    }
    for key, value in result.items():
        if key.endswith("ms"):
            out[key.replace("_ms", "")] = value / 1000.0
        if "tpot" in key:
            out[key.replace("_ms", "").replace("tpot", "intvty")] = 1000.0 / value
    return out


@pytest.mark.slow  # 1.3 s of CPU a case: upstream's result script in a process
def test_process_result_reads_a_servelab_result_as_upstream_computes_it(mock_server, tmp_path):
    server = mock_server("--token-delay-ms", "3")
    result = inferencex_bench(server, tmp_path, "ix")
    # the fields its processing and power validation read, under their names
    for field in ("benchmark_start_time_unix", "benchmark_end_time_unix", "duration", "completed"):
        assert isinstance(result[field], float | int) and not isinstance(result[field], bool), field
    assert result["benchmark_end_time_unix"] - result["benchmark_start_time_unix"] == pytest.approx(
        result["duration"]
    )
    for stat in ("mean", "median", "std", "p90", "p99", "p99.9"):
        for metric in ("ttft", "tpot", "itl", "e2el"):
            assert f"{stat}_{metric}_ms" in result, f"{stat}_{metric}_ms"
    # InferenceX's length rule: every prompt and output length in [int(L x 0.8), L]
    assert result["completed"] == 24
    assert 24 * 12 <= result["total_output_tokens"] <= 24 * 16
    write_telemetry(
        tmp_path / "gpu_metrics.csv", result["benchmark_start_time_unix"], result["benchmark_end_time_unix"]
    )

    run = process_result(tmp_path, "ix", tmp_path / "gpu_metrics.csv")

    assert run.returncode == 0, run.stderr
    agg = json.loads((tmp_path / "agg_ix.json").read_text())
    assert "[aggregate_power] avg_power_w=" in run.stdout
    assert json.loads(run.stdout[run.stdout.index("{\n") :]) == agg  # it prints what it wrote, last
    want = upstream_rules(result)
    power = {k: agg.pop(k) for k in list(agg) if k not in want}
    assert agg == pytest.approx(want)
    # its power validation took the benchmark window and integrated the telemetry over it
    window = result["benchmark_end_time_unix"] - result["benchmark_start_time_unix"]
    energy = sum(GPU_WATTS) * window
    assert power["power_valid"] == 1
    assert power["total_gpu_energy_j"] == pytest.approx(energy, abs=1e-3)
    assert power["avg_power_w"] == pytest.approx(sum(GPU_WATTS) / GPUS, abs=1e-3)
    assert power["joules_per_output_token"] == pytest.approx(energy / result["total_output_tokens"], abs=1e-6)
    assert power["joules_per_successful_query"] == pytest.approx(energy / result["completed"], abs=1e-6)
    sidecar = json.loads((tmp_path / "power_validation_ix.json").read_text())
    assert sidecar["power_valid"] is True and sidecar["reasons"] == []
    assert sidecar["benchmark_window"]["start_time_unix"] == result["benchmark_start_time_unix"]


@pytest.mark.slow  # 1.2 s of CPU a case: upstream's result script in a process
def test_one_output_token_writes_no_tpot_that_upstream_would_divide_by(mock_server, tmp_path):
    """With one output token per request TPOT is undefined; vLLM and InferenceX's client write it as 0, and
    InferenceX's process_result.py then divides 1000 by it. servelab leaves the TPOT fields out."""
    server = mock_server("--token-delay-ms", "1")
    result = inferencex_bench(server, tmp_path, "one", "--random-output-len", "1")
    assert result["total_output_tokens"] == result["completed"] == 24
    assert not [k for k in result if "tpot" in k]

    run = process_result(tmp_path, "one", None)

    assert run.returncode == 0, run.stderr
    agg = json.loads((tmp_path / "agg_one.json").read_text())
    want = upstream_rules(result)
    assert {k: v for k, v in agg.items() if k in want} == pytest.approx(want)
    assert not [k for k in agg if "intvty" in k]
    assert agg["power_valid"] == 0  # no telemetry: recorded as invalid, as in InferenceX's CI without one

    # the 0 vLLM writes instead is what upstream's script cannot take
    zero = dict(result, mean_tpot_ms=0.0)
    (tmp_path / "zero.json").write_text(json.dumps(zero))
    crashed = process_result(tmp_path, "zero", None)
    assert crashed.returncode != 0 and "ZeroDivisionError" in crashed.stderr


def test_pinned_tools_name_their_provenance():
    """The pinned scripts sit beside their provenance (commit, licence) and the refresh script copies them."""
    upstream = (UTILS.parent / "UPSTREAM.md").read_text()
    assert "commit: " in upstream and "licence: Apache-2.0" in upstream
    assert "utils/process_result.py" in upstream and "utils/aggregate_power.py" in upstream
    assert "Apache License" in (UTILS.parent / "LICENSE").read_text()
    refresh = (Path(__file__).resolve().parents[2] / "scripts" / "refresh_upstream_data.py").read_text()
    assert '"utils/process_result.py", "utils/aggregate_power.py"' in refresh
