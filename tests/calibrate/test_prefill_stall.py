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
        # take a smaller share of the run, and the TPOT falls towards the decode step
        assert probe["prefill_share"] < shipped["prefill_share"]
        assert probe["tpot"] < shipped["tpot"]
        assert probe["ttft_mean"] < shipped["ttft_mean"]


def test_a_what_if_that_is_not_a_calibrated_parameter_is_refused_in_one_line(tmp_path):
    err = run_accuracy_python([SCRIPT, *SWEEP, "--what-if", "api_request_us=5"], returncode=2)
    assert err.count("\n") == 1 and "--what-if" in err and "api_request_us=5" in err
    err = run_accuracy_python([SCRIPT, *SWEEP, "--what-if", "eager_moe_route_us=-1"], returncode=2)
    assert "--what-if" in err and "Traceback" not in err
    err = run_accuracy_python([SCRIPT, "--engine", "vllm"], returncode=2)
    assert err.count("\n") == 1 and "--engine" in err and "'vllm'" in err
