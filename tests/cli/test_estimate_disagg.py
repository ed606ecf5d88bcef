"""`servelab estimate --mode disagg`: the JSON of one given split, its provenance labels, and bad input as
one line naming the option (exit 2)."""

import json

import pytest
from clirun import servelab

SPLIT = ("--prefill-tp", "2", "--prefill-workers", "1", "--decode-tp", "2", "--decode-workers", "1")
BASE = ("estimate", "llama-3.1-8b", "--mode", "disagg", "--isl", "2048", "--osl", "256", "--batch", "32")


def test_disagg_json_has_the_ttft_parts_rate_and_provenance():
    r = servelab(*BASE, *SPLIT, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["schema"] == "servelab.estimate" and data["mode"] == "disagg"
    assert data["gpus"] == 4 and data["parallel"] == "1x tp2 | 1x tp2"
    assert data["decode"]["concurrency_per_worker"] == 32 and data["bound"] == "decode"
    parts = data["ttft_parts_ms"]
    assert sum(parts.values()) == pytest.approx(data["ttft_ms"])
    assert data["ttft_ms_low"] <= data["ttft_ms"] <= data["ttft_ms_high"]
    assert data["kv_link"] == "nvlink"  # 4 GPUs of one HGX node
    # output tokens/s per GPU is the request rate times the output length over the GPUs
    assert data["output_tokens_per_s_per_gpu"] == pytest.approx(data["request_rate"] * 256 / 4)
    prov = data["provenance"]
    assert set(prov["figures"]) == {"prefill_queue_and_prefill", "kv_transfer", "decode_first_step", "tpot",
                                    "request_rate"}  # fmt: skip
    assert "open loop" in prov["figures"]["prefill_queue_and_prefill"]
    assert "nvlink" in prov["figures"]["kv_transfer"]
    assert sum(prov["kernel_time_by_source"].values()) == pytest.approx(1.0, abs=1e-3)  # shares, rounded
    assert prov["engine"]


def test_disagg_table_labels_each_figure():
    r = servelab(*BASE, *SPLIT)
    assert r.returncode == 0, r.stderr
    for label in ("prefill queue + prefill", "KV transfer (nvlink)", "decode first step", "TPOT ms",
                  "requests/s", "binding: the decode pool", "kernel time by source"):  # fmt: skip
        assert label in r.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--decode-tp", "2"), "--prefill-tp: --mode disagg needs each pool's layout"),
        (("--prefill-tp", "3", "--decode-tp", "2"), "--prefill-tp"),
        ((*SPLIT[:-1], "0"), "--decode-workers: expected at least 1 worker"),
        ((*SPLIT, "--tp", "2"), "--tp"),
        ((*SPLIT, "--breakdown"), "--breakdown: only with --mode static or agg"),
        (("--prefill-tp", "1", "--prefill-ep", "2", "--decode-tp", "1"), "--prefill-tp: prefill pool"),
    ],
)
def test_bad_disagg_input_is_one_line(args, says):
    r = servelab(*BASE, *args)
    assert r.returncode == 2
    assert says in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_pool_options_belong_to_disagg_mode():
    r = servelab("estimate", "llama-3.1-8b", "--mode", "agg", "--decode-workers", "2")
    assert r.returncode == 2 and "--decode-workers: only with --mode disagg" in r.stderr


def test_num_prompts_prices_a_benchmark_from_idle():
    steady = json.loads(servelab(*BASE, *SPLIT, "--json").stdout)
    r = servelab(*BASE, *SPLIT, "--num-prompts", "320", "--json")
    assert r.returncode == 0, r.stderr
    run = json.loads(r.stdout)
    assert run["num_prompts"] == 320 and "num_prompts" not in steady
    assert run["tpot_ms"] == steady["tpot_ms"] and run["ttft_ms"] > steady["ttft_ms"]
    assert sum(run["ttft_parts_ms"].values()) == pytest.approx(run["ttft_ms"])
    assert "first wave" in run["provenance"]["figures"]["prefill_queue_and_prefill"]
