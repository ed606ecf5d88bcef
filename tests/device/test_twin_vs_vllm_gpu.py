"""accuracy/twin_vs_vllm_gpu.py on the runs of a real vLLM on an H100 (tests/data/vllm_gpu): the files carry
what the twin needs to replay each run, and the comparison reads the measured run and vLLM's own histograms
as they are, then prices the run with the twin."""

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.runner.server_metrics import sums_of
from tests.accuracy_python import ACCURACY, run_accuracy_python

SCRIPT = str(ACCURACY / "twin_vs_vllm_gpu.py")
HOST_SPEED = Path(__file__).resolve().parents[2] / "scripts" / "device_vllm" / "host_speed.py"
SRC = Path(__file__).resolve().parents[2] / "src"
DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_gpu"
FOLDERS = {  # each folder of runs and how many it holds
    DATA: 13,
    DATA.with_name("vllm_gpu_heldout13"): 7,
    DATA.with_name("vllm_gpu_heldout14"): 11,
    DATA.with_name("vllm_gpu_heldout17"): 11,
    DATA.with_name("vllm_gpu_heldout18"): 7,
    DATA.with_name("vllm_gpu_steps19"): 6,
    DATA.with_name("vllm_gpu_heldout21"): 6,
    DATA.with_name("vllm_gpu_heldout22") / "interval20": 6,
    DATA.with_name("vllm_gpu_heldout22") / "interval1": 4,
}


def histogram_mean_ms(run: str, name: str) -> float:
    """vLLM's histogram mean over the run, from the saved /metrics pages (sums_of has its own tests)."""
    a, b = (sums_of((DATA / f"metrics_{run}_{when}.txt").read_text()) for when in ("before", "after"))
    count = b[f"vllm:{name}_count"] - a[f"vllm:{name}_count"]
    return (b[f"vllm:{name}_sum"] - a[f"vllm:{name}_sum"]) / count * 1e3


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda folder: folder.name)
def test_every_run_carries_its_settings_its_first_tokens_and_the_servers_metrics_around_it(folder):
    runs = sorted(folder.glob("*_c*.json"))
    assert len(runs) == FOLDERS[folder]
    seeds = set()
    for path in runs:
        run = json.loads(path.read_text())
        cfg = run["config"]
        assert run["completed"] == cfg["num_prompts"] >= 16 and run["failed"] == 0
        assert cfg["random_range_rule"] == "inferencex" and cfg["random_range_ratio"] == 0.8
        assert len(run["ttfts"]) == cfg["num_prompts"] and all(t > 0 for t in run["ttfts"])
        seeds.add(cfg["seed"])
        for when in ("before", "after"):
            assert (folder / f"metrics_{path.stem}_{when}.txt").is_file()
    assert len(seeds) == len(runs)  # no run's prompts sit in another's prefix cache


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda folder: folder.name)
def test_the_runs_show_the_client_the_twin_replays(folder):
    """What accuracy/twin_vs_vllm_gpu.py replays, as the runs recorded it: with one slot a worker process, a
    worker sends its next request (i + workers) when its last (i) ends; and vLLM's prefix cache found the
    first request's prompt (all but its last token, in 16-token blocks), which the ready check had sent, and
    nothing more unless the KV cache filled (64 clients and more: preempted requests find their own blocks
    again)."""
    for path in sorted(folder.glob("*_c*.json")):
        run = json.loads(path.read_text())
        workers, clients = run["client"]["num_workers"], run["config"]["max_concurrency"]
        starts, latencies = run["start_times"], run["latencies"]
        if workers == clients:
            for i in range(workers, len(starts)):
                assert starts[i] == pytest.approx(starts[i - workers] + latencies[i - workers], abs=0.01)
        before, after = (
            sums_of((folder / f"metrics_{path.stem}_{when}.txt").read_text()) for when in ("before", "after")
        )
        (key,) = [k for k in after if k.startswith("vllm:prefix_cache_hits_total")]
        hits = after[key] - before[key]
        first = (run["input_lens"][0] - 1) // 16 * 16
        assert hits == first if clients < 64 else hits >= first, path.name


@pytest.mark.slow  # two processes: the script and the twin it starts
def test_the_comparison_reads_the_measured_run_and_splits_its_first_token_by_vllms_histograms(tmp_path):
    for name in ("A_c8.json", "metrics_A_c8_before.txt", "metrics_A_c8_after.txt"):
        shutil.copy(DATA / name, tmp_path / name)
    out = run_accuracy_python([SCRIPT, str(tmp_path), "--system", "h100_sxm"])
    (row,) = [line.split() for line in out.splitlines() if line.startswith("A_c8 ")]
    measured = json.loads((DATA / "A_c8.json").read_text())
    ttft_p50 = statistics.median(t * 1e3 for t in measured["ttfts"])
    assert row[1:3] == ["8", "1024"]
    # TTFT p50 measured / predicted, then their ratio
    assert abs(float(row[3]) - ttft_p50) < 0.06 and row[4] == "/"
    assert float(row[6]) == pytest.approx(float(row[5]) / float(row[3]), abs=0.006)
    # the last nine fields: vLLM's mean queue / the twin's, vLLM's mean prefill / the twin's, and what of the
    # mean first token is outside both, measured / the twin's
    queue, prefill, outside = row[-9], row[-6], row[-3]
    mean_queue = histogram_mean_ms("A_c8", "request_queue_time_seconds")
    mean_prefill = histogram_mean_ms("A_c8", "request_prefill_time_seconds")
    assert float(queue) == round(mean_queue, 1)
    assert float(prefill) == round(mean_prefill, 1)
    assert float(outside) == pytest.approx(measured["mean_ttft_ms"] - mean_queue - mean_prefill, abs=0.06)
    assert float(row[-4]) > 0  # the twin's prefill of a first token, from its --explain
    assert float(row[-1]) > 0  # the twin's API server: its intake at least
    assert "TTFT within 1.5x: " in out.splitlines()[-1]
    # a warm-up run is shown and left out of the medians; the device host's CPU, where the run recorded it
    # (heldout.sh writes host_speed.py's lines beside the results), is printed first
    host = subprocess.run(
        [sys.executable, str(HOST_SPEED)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    ).stdout
    (tmp_path / "host.txt").write_text(host)
    cpu = host.splitlines()[0]
    assert cpu.startswith("cpu: ") and "sse_chunk_us: " in host and "queue_round_trip_us: " in host
    warm = run_accuracy_python([SCRIPT, str(tmp_path), "--system", "h100_sxm", "--warm-up", "A"])
    assert warm.splitlines()[0].startswith(f"the device host: {cpu}; cores: ")
    assert any(
        line.startswith("A_c8 ") and line.endswith("(warm-up: not counted)") for line in warm.splitlines()
    )
    assert warm.splitlines()[-1] == "no run counted: every run is a warm-up"


def test_a_folder_without_runs_is_refused_in_one_line(tmp_path):
    err = run_accuracy_python([SCRIPT, str(tmp_path / "missing")], returncode=2)
    assert err.count("\n") == 1 and "no result files" in err


@pytest.mark.slow  # two processes: the script and the twin it starts
def test_the_comparison_says_how_many_requests_vllm_preempted_and_how_many_the_twin_did(tmp_path):
    """64 clients of 8,192-token prompts filled the H100's KV cache: vLLM's counter moved over the run."""
    for name in ("B_c64.json", "metrics_B_c64_before.txt", "metrics_B_c64_after.txt"):
        shutil.copy(DATA / name, tmp_path / name)
    out = run_accuracy_python([SCRIPT, str(tmp_path), "--system", "h100_sxm"])
    before, after = (
        sums_of((DATA / f"metrics_B_c64_{when}.txt").read_text()) for when in ("before", "after")
    )
    preempted = after["vllm:num_preemptions_total"] - before["vllm:num_preemptions_total"]
    assert preempted > 0
    (line,) = [line.strip() for line in out.splitlines() if "preempted requests" in line]
    said, twin_count = line.split(": ")[1].split(" / ")
    assert int(said) == preempted and int(twin_count) >= 0


def test_server_args_outside_the_scheduler_limits_are_refused_in_one_line(tmp_path):
    err = run_accuracy_python(
        [SCRIPT, str(DATA), "--server-args", "--max-num-seqs 48 --port 1"], returncode=2
    )
    assert err.splitlines()[-1].endswith(
        "argument --server-args: expected one of --max-num-batched-tokens, --max-num-seqs, "
        "--gpu-memory-utilization, --max-cudagraph-capture-size, --stream-interval, got '--port'"
    )


def test_at_one_client_the_first_tokens_are_set_side_by_side_request_by_request(tmp_path):
    """A_c1 sent the twin's own prompts (same lengths): request 0's pair is the run's and the twin's first
    token, and the others' gaps are measured minus predicted, ms, request by request."""
    for name in ("A_c1.json", "metrics_A_c1_before.txt", "metrics_A_c1_after.txt"):
        shutil.copy(DATA / name, tmp_path / name)
    out = run_accuracy_python([SCRIPT, str(tmp_path), "--system", "h100_sxm"])
    (line,) = [line.strip() for line in out.splitlines() if line.strip().startswith("request by request")]
    measured = json.loads((DATA / "A_c1.json").read_text())
    pair = line.split("ready check) ")[1].split(" ms")[0]
    first_measured, first_predicted = (float(x) for x in pair.split(" / "))
    assert first_measured == round(measured["ttfts"][0] * 1e3, 1)
    # the twin computes only the last token of a cached prompt: its first token comes well before a prefill's
    assert 0 < first_predicted < statistics.median(t * 1e3 for t in measured["ttfts"][1:])
    median, spread = line.split("others median ")[1].split(" ms (")
    least, most = (float(x) for x in spread.rstrip(")").split(" to "))
    assert least <= float(median) <= most


def test_runs_that_sent_other_prompts_are_not_set_side_by_side(tmp_path):
    """Pairs by index mean nothing where the twin's prompts are not the run's: no line then."""
    measured = json.loads((DATA / "A_c1.json").read_text())
    measured["config"]["seed"] += 1  # the twin draws other lengths; the measured ones stay
    (tmp_path / "A_c1.json").write_text(json.dumps(measured))
    for name in ("metrics_A_c1_before.txt", "metrics_A_c1_after.txt"):
        shutil.copy(DATA / name, tmp_path / name)
    out = run_accuracy_python([SCRIPT, str(tmp_path), "--system", "h100_sxm"])
    assert "A_c1 " in out and "request by request" not in out
