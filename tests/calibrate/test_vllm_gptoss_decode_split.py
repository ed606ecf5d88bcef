"""accuracy/vllm_gptoss_decode_split.py: each development point of vLLM's gpt-oss on one system, its TPOT gap
beside the static decode step's kernel time by part."""

import json
from pathlib import Path

import pytest

from servelab.predict.engines import engine_profile
from servelab.predict.static import estimate_static
from servelab.specs import Parallel, load_model, load_system
from tests.accuracy_python import ACCURACY, run_accuracy_python

SCRIPT = str(ACCURACY / "vllm_gptoss_decode_split.py")
DATA = Path(__file__).resolve().parents[1] / "data" / "closed_loop"
# a development point of the group: H100, vLLM 0.18.0, gpt-oss-120b at tp8, 4 clients of 1,024 / 1,024
TP8_C4 = "2026_03_25_gpt_oss_120b_h100_sxm_vllm_fp4_agg_1024x1024_c4_tp8_0_ep1_0_210"
TP8_C4_TPOT_MS = 3.6378634292781338  # measured, as the pinned row has it


@pytest.mark.slow  # reads every pinned point in a process of its own
def test_a_priced_point_is_a_line_whose_parts_are_its_static_decode_step(tmp_path):
    priced = tmp_path / "dev.json"
    twin = TP8_C4_TPOT_MS + 1.0  # the twin one millisecond long
    priced.write_text(json.dumps({"points": {TP8_C4: {"tpot_p50": twin, "ttft_mean": 30.0}}}))
    out = run_accuracy_python(
        [SCRIPT, str(priced), "--system", "h100_sxm", "--version", "0.18.0"]
    ).splitlines()
    assert len(out) == 2  # the header and the one priced point: the others have no price
    point, tpot, parts, needed = out[1].split("|")
    assert point.split() == ["tp8", "1024/", "1024", "c4"]
    assert [float(v) for v in tpot.split()] == [round(TP8_C4_TPOT_MS, 2), round(twin, 2), 1.0]
    moe, *rest = (float(v) for v in parts.split())
    static = estimate_static(
        load_model("gpt-oss-120b"),
        load_system("h100_sxm"),
        Parallel(tp=8),
        engine_profile("vllm"),
        4,
        1024,
        1024,
        with_breakdown=True,
    )
    decode = static.breakdown["decode_us"]
    assert moe == pytest.approx(decode["moe_experts"] / 1000, abs=0.006)
    assert moe + sum(rest) == pytest.approx(sum(decode.values()) / 1000, abs=0.03)
    moe_x, rest_x = (float(v) for v in needed.split())
    assert moe_x == pytest.approx(1 - 1.0 / moe, abs=0.02) and rest_x == pytest.approx(
        1 - 1.0 / sum(rest), abs=0.02
    )


def test_a_priced_file_it_cannot_read_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    err = run_accuracy_python([SCRIPT, str(bad)], returncode=2)
    assert err.count("\n") == 1 and str(bad) in err and "closed_loop.py" in err
