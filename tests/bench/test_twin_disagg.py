"""`servelab bench --simulate` on a disaggregated deployment (--prefill-* / --decode-*): the aggregated twin's
result file, with both pools, the transfer's and the router's provenance and no claimed band; the client's
concurrency held; bad input as one line (exit 2)."""

import json
from pathlib import Path

import pytest
from clirun import servelab

MODEL = ("--simulate", "--model", "llama-3.1-8b", "--system", "h200_sxm")
SPLIT = ("--prefill-tp", "1", "--decode-tp", "1")
STREAM = ("--random-input-len", "512", "--random-output-len", "32", "--num-prompts", "24")


def twin(tmp_path: Path, *args: str, name: str = "twin.json") -> dict:
    """Run the twin (it sends nothing) and return its saved result, per-request lists included."""
    r = servelab("bench", *MODEL, *args, "--save-result", "--save-detailed", "--result-dir", str(tmp_path),
                 "--result-filename", name)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads((tmp_path / name).read_text())


def test_the_disaggregated_twin_writes_the_aggregated_twins_fields(tmp_path):
    agg = twin(tmp_path, "--tp", "1", *STREAM, "--max-concurrency", "4", name="agg.json")
    dis = twin(tmp_path, *SPLIT, *STREAM, "--max-concurrency", "4", name="dis.json")
    assert set(agg) <= set(dis)
    assert dis["source"] == "simulated" and dis["completed"] == 24 and dis["failed"] == 0
    dep = dis["deployment"]
    assert dep["mode"] == "disagg" and dep["gpus"] == 2 and dep["parallel"] == "1x tp1 | 1x tp1"
    assert (
        dep["prefill"]["workers"] == 1
        and dep["decode"]["parallel"] == "tp1"
        and dep["router"] == "round-robin"
    )
    pred = dis["prediction"]
    for pool in ("prefill", "decode"):  # each pool's op sources
        assert sum(pred[pool]["ops_by_source"].values()) > 0
        assert sum(pred[pool]["kernel_time_by_source"].values()) == pytest.approx(1.0, abs=1e-3)
    assert pred["kv_transfer"]["how"].startswith("roofline over nvlink at efficiency 0.73")
    assert pred["router"]["policy"] == "round-robin"
    # a disaggregated prediction claims no band, as estimate --mode disagg says
    assert pred["serving_band"]["claim"] is None and "disaggregated" in pred["serving_band"]["line"]
    # the mean TTFT is its parts: send to prefill end, the transfer, KV arrival to the first token
    assert sum(pred["ttft_parts_ms"].values()) == pytest.approx(dis["mean_ttft_ms"], rel=1e-9)
    assert 0 < pred["ttft_parts_ms"]["kv_transfer"] < pred["ttft_parts_ms"]["prefill_queue_and_prefill"]
    band = pred["band"]
    assert (
        band["low"]["median_tpot_ms"] <= band["nominal"]["median_tpot_ms"] <= band["high"]["median_tpot_ms"]
    )


def test_a_closed_loop_keeps_exactly_its_concurrency_in_flight(tmp_path):
    c = 5
    dis = twin(tmp_path, *SPLIT, "--decode-workers", "2", *STREAM, "--max-concurrency", str(c))
    starts, ends = (
        dis["start_times"],
        [s + e for s, e in zip(dis["start_times"], dis["latencies"], strict=True)],
    )
    last_send = max(starts)
    for s in starts:
        if s < last_send:
            assert sum(1 for a, b in zip(starts, ends, strict=True) if a <= s < b) == c


def test_one_prefill_worker_past_its_capacity_queues(tmp_path):
    # the same open-loop rate, sixty prompts against twenty: a saturated prefill worker's queue keeps growing
    args = (*SPLIT, "--random-input-len", "8192", "--random-output-len", "8", "--request-rate", "200")
    short = twin(tmp_path, *args, "--num-prompts", "20", name="short.json")
    long = twin(tmp_path, *args, "--num-prompts", "60", name="long.json")
    assert long["mean_ttft_ms"] > 2 * short["mean_ttft_ms"]
    assert (
        long["prediction"]["ttft_parts_ms"]["prefill_queue_and_prefill"]
        > 2 * short["prediction"]["ttft_parts_ms"]["prefill_queue_and_prefill"]
    )
    # a second prefill worker takes half the queue
    two = twin(tmp_path, *args, "--prefill-workers", "2", "--num-prompts", "60", name="two.json")
    assert two["mean_ttft_ms"] < 0.7 * long["mean_ttft_ms"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--decode-tp", "1"), "--prefill-tp: a disaggregated --simulate needs each pool's layout"),
        (("--prefill-tp", "1", "--prefill-workers", "2"), "--decode-tp: a disaggregated --simulate needs"),
        ((*SPLIT, "--tp", "2"), "--tp / --ep / --dp-attn / --pp"),
        ((*SPLIT, "--router", "random"), "--router: expected one of round-robin, least-loaded"),
        ((*SPLIT, "--enable-prefix-caching"), "--enable-prefix-caching: not simulated for a disaggregated"),
        ((*SPLIT, "--explain"), "--explain: not with a disaggregated deployment"),
        (("--prefill-tp", "1", "--decode-tp", "3"), "--decode-tp: decode pool"),
    ],
)
def test_bad_disaggregated_input_is_one_line(args, says):
    r = servelab("bench", *MODEL, *STREAM, *args)
    assert r.returncode == 2
    err = r.stderr.strip()
    assert says in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_a_pool_too_small_for_the_model_is_one_line():
    r = servelab("bench", "--simulate", "--model", "deepseek-v3", "--system", "h200_sxm", "--prefill-tp", "1",
                 "--decode-tp", "8", *STREAM)  # fmt: skip
    assert r.returncode == 2
    err = r.stderr.strip()
    assert err.startswith("error: --prefill-tp: prefill pool") and len(err.splitlines()) == 1


def test_pools_without_simulate_are_refused():
    r = servelab("bench", "--model", "m", "--prefill-tp", "1")
    assert r.returncode == 2
    assert "--prefill-tp: only with --simulate" in r.stderr
