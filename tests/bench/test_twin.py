"""`servelab bench --simulate`: the simulated twin sends (in simulation) the stream the real run sends and
writes the real run's result fields, plus where the prediction came from."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.bench.config import BenchConfig
from servelab.bench.runner import prepare
from servelab.cli.main import main
from servelab.results.importers import import_files
from servelab.results.store import Store

CLI = [sys.executable, "-m", "servelab.cli.main", "bench"]
DEPLOYMENT = ("--simulate", "--model", "llama-3.1-8b", "--system", "h200_sxm", "--tp", "1")
STREAM = ("--random-input-len", "64", "--random-output-len", "16", "--num-prompts", "12")


def twin(tmp_path: Path, *args: str, name: str = "twin.json") -> dict:
    """Run the twin in this process (it sends nothing) and return its saved result."""
    argv = ["servelab", "bench", *DEPLOYMENT, *args, "--save-result", "--result-dir", str(tmp_path)]
    argv += ["--result-filename", name]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as e:
            main()
    assert e.value.code == 0
    return json.loads((tmp_path / name).read_text())


@pytest.mark.slow  # 1.2 s of CPU a case: a real bench process beside the twin
def test_the_twin_writes_every_field_of_a_real_result(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "1", "--first-token-delay-ms", "2")
    common = [*STREAM, "--max-concurrency", "4", "--percentile-metrics", "ttft,tpot,itl,e2el"]
    common += ["--metric-percentiles", "50,90,99", "--goodput", "ttft:500", "--save-detailed"]
    real_cmd = CLI + ["--base-url", s.url, "--model", "mock", *common, "--save-result"]
    real_cmd += ["--result-dir", str(tmp_path), "--result-filename", "real.json", "--num-workers", "1"]
    p = subprocess.run(real_cmd, capture_output=True, text=True, timeout=90)
    assert p.returncode == 0, p.stderr
    real = json.loads((tmp_path / "real.json").read_text())
    sim = twin(tmp_path, *common)
    # a prediction ran at no wall-clock time: it has no measured window (benchmark_*_time_unix)
    window = {"benchmark_start_time_unix", "benchmark_end_time_unix"}
    assert window <= set(real) and not window & set(sim)
    assert set(real) - {"records_file"} - window <= set(sim)
    assert sim["source"] == "simulated" and real.get("source") is None
    # the client section has the same fields; a prediction ran no client, so no host of one
    assert set(sim["client"]) == set(real["client"])
    assert sim["client"]["host_cores"] == 0 and real["client"]["host_cores"] > 0
    assert sim["completed"] == 12 and sim["failed"] == 0 and sim["total_output_tokens"] == 12 * 16
    for key in ("median_ttft_ms", "p90_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "duration", "request_goodput"):
        assert sim[key] > 0, key
    assert sim["deployment"]["system"] == "h200_sxm" and sim["deployment"]["engine"] == "vllm"
    # every figure says where it came from: the engine profile and the op latencies' sources
    assert sim["prediction"]["engine_profile"] and sum(sim["prediction"]["ops_by_source"].values()) > 0
    band = sim["prediction"]["band"]
    assert (
        band["low"]["median_tpot_ms"] <= band["nominal"]["median_tpot_ms"] <= band["high"]["median_tpot_ms"]
    )


def test_same_seed_same_lengths_as_the_real_runs_dataset(tmp_path):
    args = ("--random-range-ratio", "0.5", "--seed", "7", "--save-detailed")
    sim = twin(tmp_path, *STREAM, *args)
    cfg = BenchConfig(
        model="m",
        random_input_len=64,
        random_output_len=16,
        num_prompts=12,
        random_range_ratio=0.5,
        seed=7,
    )
    items = prepare(cfg, None).data.items
    assert sim["input_lens"] == [it.prompt_len for it in items]
    assert sim["output_lens"] == [it.output_len for it in items]
    assert len(set(sim["input_lens"])) > 1


def test_warmups_are_excluded(tmp_path):
    plain = twin(tmp_path, *STREAM, "--max-concurrency", "4", name="plain.json")
    warm = twin(tmp_path, *STREAM, "--max-concurrency", "4", "--num-warmups", "3", name="warm.json")
    assert warm["completed"] == plain["completed"] == 12
    for key in ("median_ttft_ms", "mean_tpot_ms", "duration", "total_input_tokens"):
        assert warm[key] == plain[key], key


def test_warmups_leave_the_shared_prefix_cached(tmp_path):
    """The one trace a warm-up leaves: with prefix caching, every measured request finds the shared random
    prefix cached (without warm-ups or the ready check the first wave computes it)."""
    args = (*STREAM, "--random-prefix-len", "4096", "--enable-prefix-caching", "--max-concurrency", "4")
    cold = twin(tmp_path, *args, "--no-ready-check", name="cold.json")
    warm = twin(tmp_path, *args, "--no-ready-check", "--num-warmups", "1", name="warm.json")
    ready = twin(tmp_path, *args, name="ready.json")  # the ready check is a warm-up of its own
    assert warm["completed"] == cold["completed"] == 12
    assert warm["mean_ttft_ms"] < cold["mean_ttft_ms"]
    assert ready["mean_ttft_ms"] == warm["mean_ttft_ms"]


def test_the_ready_check_leaves_the_first_prompt_cached(tmp_path):
    """It sends the first request's prompt, so with prefix caching that request computes one block at most."""
    args = ("--random-input-len", "4096", "--random-output-len", "16", "--num-prompts", "4")
    args += ("--max-concurrency", "1", "--save-detailed")
    plain = twin(tmp_path, *args, "--enable-prefix-caching", "--no-ready-check", name="plain.json")
    ready = twin(tmp_path, *args, "--enable-prefix-caching", name="ready.json")
    off = twin(tmp_path, *args, "--no-enable-prefix-caching", name="off.json")  # then it leaves nothing
    default = twin(tmp_path, *args, name="default.json")  # vLLM's default: prefix caching on
    assert default["ttfts"] == ready["ttfts"]
    assert ready["ttfts"][0] < plain["ttfts"][0] / 2
    assert ready["ttfts"][1:] == pytest.approx(plain["ttfts"][1:]) == off["ttfts"][1:]
    assert off["ttfts"][0] == pytest.approx(plain["ttfts"][0])


def test_each_client_worker_sends_its_own_share(tmp_path):
    """With --num-workers 4 and four slots, each worker is a chain of its own requests (i, i + 4, ...): the
    request after i is sent when i ends, not when the first of all ends."""
    args = (*STREAM, "--random-range-ratio", "0.9", "--max-concurrency", "4", "--save-detailed")
    chains = twin(tmp_path, *args, "--num-workers", "4", name="chains.json")
    one = twin(tmp_path, *args, name="one.json")
    ends = [s + e for s, e in zip(chains["start_times"], chains["latencies"], strict=True)]
    assert chains["start_times"][4:] == pytest.approx(ends[:-4])
    one_ends = sorted(s + e for s, e in zip(one["start_times"], one["latencies"], strict=True))
    assert one["start_times"][4:] == pytest.approx(one_ends[:8])
    assert chains["start_times"] != one["start_times"]


def test_an_open_loop_uses_the_real_runs_arrival_offsets(tmp_path):
    args = ("--request-rate", "20", "--burstiness", "0.5", "--seed", "3", "--save-detailed")
    sim = twin(tmp_path, *STREAM, *args)
    cfg = BenchConfig(
        model="m",
        random_input_len=64,
        random_output_len=16,
        num_prompts=12,
        request_rate=20,
        burstiness=0.5,
        seed=3,
    )
    offsets = [it.offset for it in prepare(cfg, None).work_items(cfg)]
    assert sim["start_times"] == pytest.approx(offsets)
    assert sim["request_rate"] == 20


def test_a_closed_loop_starts_every_client_at_zero(tmp_path):
    sim = twin(tmp_path, *STREAM, "--max-concurrency", "4", "--save-detailed")
    starts = sim["start_times"]
    assert starts[:4] == [0.0] * 4 and all(t > 0 for t in starts[4:])


def test_an_engines_settings_shape_the_schedule(tmp_path):
    one = twin(tmp_path, *STREAM, "--max-concurrency", "4", "--max-num-seqs", "1", name="one.json")
    four = twin(tmp_path, *STREAM, "--max-concurrency", "4", name="four.json")
    assert one["duration"] > four["duration"]
    assert one["deployment"]["max_num_seqs"] == 1


def test_a_kv_cache_smaller_than_the_clients_need_preempts_and_the_result_counts_it(tmp_path):
    """Eight clients of 1,024 + 256 tokens: a memory share that leaves the KV cache a few thousand tokens
    preempts (vLLM counts these in vllm:num_preemptions_total); vLLM's default share preempts none."""
    stream = ("--random-input-len", "1024", "--random-output-len", "256", "--num-prompts", "16")
    stream += ("--max-concurrency", "8")
    small = twin(tmp_path, *stream, "--gpu-memory-utilization", "0.12", name="small.json")
    default = twin(tmp_path, *stream, name="default.json")
    assert small["deployment"]["gpu_memory_utilization"] == 0.12
    assert small["prediction"]["preemptions"] > 0 and default["prediction"]["preemptions"] == 0
    assert small["duration"] > default["duration"]  # preempted requests recompute their prompt


def test_tensorrt_llm_attention_dp_balancing_holds_new_prompts(tmp_path):
    # DeepSeek-R1 on 8 attention-DP ranks, 4 clients per rank with outputs of different lengths: balanced, a
    # rank's new prompt waits for the other ranks (or the timeout) while its decodes run
    dp8 = ("--model", "deepseek-r1", "--tp", "8", "--ep", "8", "--dp-attn", "--engine", "trtllm")
    stream = ("--random-input-len", "1024", "--random-output-len", "256", "--random-range-ratio", "0.5")
    stream += ("--num-prompts", "128", "--max-concurrency", "32")
    off = twin(tmp_path, *dp8, *stream, name="off.json")
    on = twin(
        tmp_path,
        *dp8,
        *stream,
        "--attention-dp-balance",
        "--attention-dp-timeout-iters",
        "60",
        name="on.json",
    )
    assert on["mean_ttft_ms"] > off["mean_ttft_ms"]
    assert on["deployment"]["attention_dp_balance"] and on["deployment"]["attention_dp_timeout_iters"] == 60
    assert off["deployment"]["attention_dp_balance"] is None  # the engine's default: off


def test_vllm_async_scheduling_is_the_default_and_can_be_turned_off(tmp_path):
    # 16 clients of 2,000-token prompts: a prompt that arrives while others decode waits for the step vLLM
    # formed ahead as well (on by default since vLLM 0.14), so its first token comes a step later
    load = ("--random-input-len", "2000", "--random-output-len", "64", "--num-prompts", "64")
    load += ("--max-concurrency", "16")
    default = twin(tmp_path, *load, name="default.json")
    off = twin(tmp_path, *load, "--no-async-scheduling", name="off.json")
    assert default["mean_ttft_ms"] > off["mean_ttft_ms"]
    assert "async scheduling on" in default["prediction"]["engine_profile"]
    assert off["deployment"]["async_scheduling"] is False


@pytest.mark.parametrize(
    "args,start",
    [
        (("--system", "nope"), "error: unknown system"),
        (("--tp", "3"), "error:"),
        (("--engine", "vlm"), "error: --engine: unknown engine 'vlm'"),
        (("--max-num-seqs", "0"), "error: --max-num-seqs:"),
        (("--spec-acceptance", "2"), "error: --spec-acceptance:"),
        (("--dataset-name", "sonnet", "--dataset-path", "x"), "error: --dataset-name: --simulate replays"),
        (("--request-rate", "sweep"), "error: --request-rate"),
        (("--random-input-len", "100000000"), "error: --random-input-len:"),
        (("--batch-wait-max-tokens-ratio", "2"), "error: --batch-wait-max-tokens-ratio:"),
        (("--engine", "sglang", "--no-async-scheduling"), "error: --async-scheduling: sglang has no"),
    ],
)
def test_bad_deployment_input_is_one_line(monkeypatch, capsys, args, start):
    monkeypatch.setattr(sys, "argv", ["servelab", "bench", *DEPLOYMENT, "--num-prompts", "2", *args])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith(start) and len(err.splitlines()) == 1, err


def test_a_twin_needs_a_system(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["servelab", "bench", "--simulate", "--model", "llama-3.1-8b"])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--system" in err and len(err.splitlines()) == 1, err


def test_an_imported_twin_result_is_stored_as_predicted(tmp_path):
    twin(tmp_path, *STREAM, "--max-concurrency", "4")
    with Store.open(tmp_path / "results.db") as store:
        (imported,) = import_files(store, [tmp_path / "twin.json"])
        sources = {m.source for m in store.metrics(imported.run_id)}
    assert sources == {"predicted"}
