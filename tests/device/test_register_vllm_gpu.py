"""accuracy/register_vllm_gpu.py: the twin's predictions of held-out GPU runs, saved with their sha256 before
the runs, with the settings bench.sh will send (5 x C prompts, at least 16; seed C x 10 + ISL + offset)."""

import hashlib
import json

import pytest

from tests.accuracy_python import ACCURACY, run_accuracy_python

SCRIPT = str(ACCURACY / "register_vllm_gpu.py")


@pytest.mark.slow  # a twin process per prediction
def test_each_prediction_has_the_runs_settings_and_its_sha256_is_registered(tmp_path):
    out = tmp_path / "reg"
    run_accuracy_python(
        [
            SCRIPT,
            str(out),
            "Q 512 16 2",
            "--model",
            "Qwen/Qwen3-30B-A3B",
            "--offset",
            "7",
            "--systems",
            "h100_sxm",
        ]
    )
    path = out / "h100_sxm_Q_c2.json"
    cfg = json.loads(path.read_text())["config"]
    assert (cfg["random_input_len"], cfg["random_output_len"], cfg["max_concurrency"]) == (512, 16, 2)
    assert cfg["num_prompts"] == 16 and cfg["seed"] == 2 * 10 + 512 + 7
    header, line = (out / "REGISTERED.txt").read_text().splitlines()
    assert "Qwen/Qwen3-30B-A3B" in header and "SEED_OFFSET=7" in header
    assert line == f"{hashlib.sha256(path.read_bytes()).hexdigest()}  h100_sxm_Q_c2.json"


def test_a_run_not_written_as_tag_lengths_and_clients_is_refused_in_one_line(tmp_path):
    err = run_accuracy_python([SCRIPT, str(tmp_path / "reg"), "Q 512 x 2"], returncode=2)
    assert "expected 'TAG ISL OSL C[,C...]', got 'Q 512 x 2'" in err.splitlines()[-1]
    assert not (tmp_path / "reg").exists()


@pytest.mark.slow  # a twin process
def test_a_servers_scheduler_limits_are_the_ones_the_prediction_prices(tmp_path):
    """--server-args as start.sh's SERVER_ARGS: the twin runs with that token budget, sequence cap and memory
    share, and REGISTERED.txt says them."""
    out = tmp_path / "reg"
    limits = "--max-num-batched-tokens 1024 --max-num-seqs 3 --gpu-memory-utilization 0.85"
    run_accuracy_python(
        [SCRIPT, str(out), "Q 2048 16 4", "--model", "Qwen/Qwen3-30B-A3B", "--systems", "h100_sxm"]
        + ["--server-args", limits]
    )
    deployment = json.loads((out / "h100_sxm_Q_c4.json").read_text())["deployment"]
    assert deployment["max_num_batched_tokens"] == 1024 and deployment["max_num_seqs"] == 3
    assert deployment["gpu_memory_utilization"] == 0.85
    header = (out / "REGISTERED.txt").read_text().splitlines()[0]
    limits_said = "--max-num-seqs 3 --max-num-batched-tokens 1024 --gpu-memory-utilization 0.85"
    assert header.endswith(f"server limits {limits_said}")


def test_a_server_flag_outside_the_scheduler_limits_is_refused_in_one_line(tmp_path):
    for limits, says in [
        (
            "--enforce-eager 1",
            "expected one of --max-num-batched-tokens, --max-num-seqs, "
            "--gpu-memory-utilization, --max-cudagraph-capture-size, --stream-interval, "
            "got '--enforce-eager'",
        ),
        ("--max-num-seqs 4.5", "--max-num-seqs expects a positive integer, got '4.5'"),
        ("--gpu-memory-utilization 1.2", "--gpu-memory-utilization expects a share in (0, 1], got '1.2'"),
    ]:
        err = run_accuracy_python(
            [SCRIPT, str(tmp_path / "reg"), "Q 512 16 2", "--server-args", limits], returncode=2
        )
        assert err.splitlines()[-1].endswith(f"argument --server-args: {says}")
    assert not (tmp_path / "reg").exists()
