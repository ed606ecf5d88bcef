"""accuracy/prefill_stall.py: the twin's TPOT split into decode steps and the prefill steps that stall them,
on development closed-loop points (SGLang DeepSeek-R1 NVFP4 tp8-ep8 on B200, 1,024 + 1,024 tokens, 4 to 128
clients), as shipped and with one calibrated parameter changed."""

import json
from pathlib import Path

import pytest

from tests.accuracy_python import ACCURACY, run_accuracy_python

SCRIPT = str(ACCURACY / "prefill_stall.py")
# one deployment's load sweep of the development part (tests/data/closed_loop)
SWEEP = ["--engine", "sglang", "--systems", "b200_sxm", "--isl", "1024", "--osl", "1024", "--only", "_cfg201"]


def sweep(tmp_path: Path, *extra: str) -> list[dict]:
    out = tmp_path / "rows.json"
    run_accuracy_python([SCRIPT, *SWEEP, *extra, "--json", str(out)])
    return sorted(json.loads(out.read_text()), key=lambda r: r["concurrency"])


@pytest.mark.slow
def test_prefill_steps_take_a_growing_share_as_clients_arrive_faster(tmp_path):
    rows = sweep(tmp_path, "--what-if", "eager_moe_route_us=0")
    assert [r["concurrency"] for r in rows] == [4, 8, 16, 32, 64, 128]
    assert all(not r["heldout"] for r in rows)
    shares = [r["shipped"]["prefill_share"] for r in rows]
    assert shares == sorted(shares) and shares[-1] > 2 * shares[0]
    for r in rows:
        shipped, probe = r["shipped"], r["what_if"]
        # prefill steps only add to the gap a decoding request sees between its tokens
        assert shipped["tpot"] >= shipped["itl"]
        # the eager MoE CPU term is paid in steps run outside CUDA graphs (the prefill steps): without it they
        # take a smaller share of the run and the first tokens come sooner
        assert probe["prefill_share"] < shipped["prefill_share"]
        assert probe["ttft_mean"] < shipped["ttft_mean"]
        # ... and from 8 clients on the TPOT falls towards the decode step; at 4 the stalls are few, and
        # requests that no longer wait ~280 ms for their first token decode together, in fuller (longer)
        # decode steps (the gap between tokens grows: ITL 6.6 -> 7.9 ms)
        if r["concurrency"] >= 8:
            assert probe["tpot"] < shipped["tpot"]
        else:
            assert probe["itl"] > shipped["itl"]


@pytest.mark.slow  # 2.2 s of CPU a case: three accuracy-script processes
def test_a_what_if_that_is_not_a_calibrated_parameter_is_refused_in_one_line(tmp_path):
    err = run_accuracy_python([SCRIPT, *SWEEP, "--what-if", "api_request_us=5"], returncode=2)
    assert err.count("\n") == 1 and "--what-if" in err and "api_request_us=5" in err
    err = run_accuracy_python([SCRIPT, *SWEEP, "--what-if", "eager_moe_route_us=-1"], returncode=2)
    assert "--what-if" in err and "Traceback" not in err
    err = run_accuracy_python([SCRIPT, "--engine", "vllm"], returncode=2)
    assert err.count("\n") == 1 and "--engine" in err and "'vllm'" in err


# TensorRT-LLM Qwen3-32B on H100, 4,096 + 128 tokens, tp1-tp8 at 8 to 128 clients: AIConfigurator's own rows
QWEN_4K = ["--engine", "trtllm", "--systems", "h100_sxm", "--only", "qwen3_32b_h100_sxm_trtllm_agg_4096x128"]


@pytest.mark.slow  # 2.0 s of CPU a case: accuracy-script processes
def test_aiconfigurator_launch_takes_each_prompt_whole_as_it_arrives(tmp_path):
    """With its generator's launch (no chunked prefill, max_num_tokens = batch + ISL + 1,500) a step holds one
    4,096-token prompt, so prompts are prefilled one a step as they arrive: the median first token stays one
    such step from 8 clients up, where the shipped 8,192-token chunks prefill two a step and keep a wave
    together, its median first token growing with the clients."""
    out = tmp_path / "rows.json"
    run_accuracy_python([SCRIPT, *QWEN_4K, "--launch", "aiconfigurator", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert len(rows) >= 16 and all(r["source"] == "aiconfigurator" and not r["heldout"] for r in rows)
    by_split: dict[str, dict[int, dict]] = {}
    for r in rows:
        by_split.setdefault(r["parallel"], {})[r["concurrency"]] = r
    for split in by_split.values():
        low, high = split[8], split[max(split)]
        assert high["what_if"]["ttft_p50"] < 1.15 * low["what_if"]["ttft_p50"]
        assert high["shipped"]["ttft_p50"] > 1.5 * low["shipped"]["ttft_p50"]


@pytest.mark.slow  # 2.5 s of CPU a case: accuracy-script processes
def test_several_what_ifs_apply_together(tmp_path):
    """TensorRT-LLM's fitted MoE terms on a Qwen3-235B point on H100, which their fit does not reach (the
    shipped price carries none: predict/fit_reach.py); a what-if that sets one of them prices all three as
    given. The route term at 0 leaves the decode step as shipped and brings the eager (CPU) term back to the
    prefill step; the eager term at 0 too takes it off again: the two what-ifs apply together."""
    out = tmp_path / "rows.json"
    point = "qwen3_235b_a22b_fp8_h100_sxm_trtllm_agg_512x512_c4_tp8"
    args = ["--engine", "trtllm", "--systems", "h100_sxm", "--only", point]
    run_accuracy_python([SCRIPT, *args, "--what-if", "moe_route_us=0", "--json", str(out)])
    (one,) = json.loads(out.read_text())
    both = ["--what-if", "moe_route_us=0", "--what-if", "eager_moe_route_us=0"]
    run_accuracy_python([SCRIPT, *args, *both, "--json", str(out)])
    (two,) = json.loads(out.read_text())
    assert one["shipped"] == two["shipped"]
    assert one["what_if"]["tpot"] == pytest.approx(one["shipped"]["tpot"], rel=0.01)
    # the CPU term is paid in eager steps only: the four prompts' one prefill step, not the decode steps
    assert two["what_if"]["tpot"] == pytest.approx(one["what_if"]["tpot"], rel=0.01)
    assert one["what_if"]["ttft_mean"] > 2 * one["shipped"]["ttft_mean"]
    assert two["what_if"]["ttft_mean"] < one["what_if"]["ttft_mean"]


def test_a_launch_other_than_aiconfigurator_or_for_another_engine_is_refused_in_one_line():
    err = run_accuracy_python([SCRIPT, *QWEN_4K, "--launch", "inferencex"], returncode=2)
    assert err.count("\n") == 1 and "--launch" in err and "'inferencex'" in err
    err = run_accuracy_python([SCRIPT, *SWEEP, "--launch", "aiconfigurator"], returncode=2)
    assert err.count("\n") == 1 and "--launch" in err and "sglang" in err


# TensorRT-LLM Llama-3.1-8B on two H100s at 8 clients, 1,024-token prompts: AIConfigurator's own rows (with
# --launch, which keeps only those; Qwen3-32B rows of the same split and load are dropped below)
LLAMA_C8 = ["--engine", "trtllm", "--systems", "h100_sxm", "--isl", "1024", "--only", "_c8_tp2_"]


def twin_gap_ms(row: dict, key: str) -> float:
    """The twin's own mean gap between completions: its cycle, TTFT + (OSL - 1) x TPOT, over the clients."""
    got = row[key]
    return (got["ttft_mean"] + (row["osl"] - 1) * got["tpot"]) / row["concurrency"]


@pytest.mark.slow  # 2.5 s of CPU: an accuracy-script process
def test_one_seat_fewer_makes_each_new_request_wait_for_another_to_finish(tmp_path):
    """With the engine holding one request fewer than the clients keep in flight, a new request waits in a
    closed loop for another to finish: its first token comes about one gap between completions later, so
    the TTFT grows with the output length as the measured rows' does; as shipped it does not."""
    out = tmp_path / "rows.json"
    probe = ["--launch", "aiconfigurator", "--fewer-seats", "1", "--json", str(out)]
    run_accuracy_python([SCRIPT, *LLAMA_C8, *probe])
    rows = sorted(
        (r for r in json.loads(out.read_text()) if r["model"] == "llama-3.1-8b"), key=lambda r: r["osl"]
    )
    assert [r["osl"] for r in rows] == [128, 256, 512] and all(not r["heldout"] for r in rows)
    for r in rows:
        gap = twin_gap_ms(r, "what_if")
        assert gap <= r["what_if"]["ttft_mean"] < 1.5 * gap
        assert r["gap_ms"] == pytest.approx((r["ttft_ms"] + (r["osl"] - 1) * r["tpot_ms"]) / 8)
    short, long = rows[0], rows[-1]
    assert long["what_if"]["ttft_mean"] > 2 * short["what_if"]["ttft_mean"]
    assert long["shipped"]["ttft_mean"] == pytest.approx(short["shipped"]["ttft_mean"], rel=0.05)
    assert long["ttft_ms"] > 2 * short["ttft_ms"]  # the measured rows


def test_a_negative_count_of_fewer_seats_is_refused_in_one_line():
    err = run_accuracy_python([SCRIPT, *LLAMA_C8, "--fewer-seats", "-1"], returncode=2)
    assert err.count("\n") == 1 and "--fewer-seats" in err and "-1" in err
