"""The roofline's INT4 weight-only experts (Kimi-K2's W4A16) under vLLM and SGLang: their weights are read at
the fraction of HBM peak the engines' kernels reach (Marlin; FlashInfer's MXINT4 on B200), fitted to
AIConfigurator's measured tables (accuracy/int4_moe_vs_aic.py); other engines, other expert formats and GPUs
without such a table keep the roofline's memory efficiency."""

import re

import pytest

from servelab.engines.vllm.kernels import MARLIN_INT4_MOE
from servelab.perfdb.keys import Moe
from servelab.perfdb.roofline import INT4_EXPERTS_HBM_FRACTION, Roofline
from servelab.specs import load_system
from tests.accuracy_python import ACCURACY, run_accuracy_python

# Kimi-K2.5's experts at TP8: a decode step of 4 tokens (weight-bound) and a prefill of 8,192
DECODE = Moe(tokens=4, hidden=7168, inter=256, experts=384, topk=8, ep=1, dtype="int4")
PREFILL = DECODE._replace(tokens=8192)
# the two tables each fraction is the mean of: (system, engine, release, kernel)
SOURCES = {
    "h100_sxm": (("vllm", "0.14.0"), ("vllm", "0.24.0")),
    "h200_sxm": (("vllm", "0.14.1.dev1+gd68209402"), ("vllm", "0.24.0")),
    "b200_sxm": (("vllm", "0.24.0"), ("sglang", "0.5.14")),
}


def weight_seconds(roof: Roofline, key: Moe) -> float:
    """The seconds the roofline reads the experts' weights in, at its own memory rate."""
    touched = key.experts * (1.0 - (1.0 - key.topk / key.experts) ** key.tokens)
    return touched * 3 * key.hidden * key.inter * 0.5625 / roof.bw


@pytest.mark.parametrize("system", sorted(INT4_EXPERTS_HBM_FRACTION))
def test_vllm_and_sglang_read_int4_experts_at_their_kernels_fraction_of_hbm_peak(system):
    spec = load_system(system)
    torch = Roofline(spec, backend="torch")
    activations = (torch.latency(DECODE).us - 3 * torch.kernel_us) * 1e-6 - weight_seconds(torch, DECODE)
    fraction = INT4_EXPERTS_HBM_FRACTION[system]
    for backend in ("vllm", "sglang"):
        roof = Roofline(spec, backend=backend)
        weights = weight_seconds(roof, DECODE) * roof.bw / (spec.hbm_bw_tbs * 1e12 * fraction)
        assert roof.latency(DECODE).us == pytest.approx((weights + activations) * 1e6 + 3 * roof.kernel_us)
        assert roof.latency(DECODE).us > torch.latency(DECODE).us  # every fraction is below the fit's
    # TensorRT-LLM's INT4 kernels are not those the tables timed; compute-bound steps do not read slower
    assert Roofline(spec, backend="trtllm").latency(DECODE).us == torch.latency(DECODE).us
    assert Roofline(spec, backend="vllm").latency(PREFILL).us == torch.latency(PREFILL).us


def test_other_formats_and_gpus_without_a_table_are_untouched():
    h200 = load_system("h200_sxm")
    for dtype in ("bf16", "fp8_block", "mxfp4", "nvfp4"):
        key = DECODE._replace(dtype=dtype)
        assert (
            Roofline(h200, backend="vllm").latency(key).us == Roofline(h200, backend="torch").latency(key).us
        )
    b300 = load_system("b300_sxm")
    assert (
        Roofline(b300, backend="vllm").latency(DECODE).us
        == Roofline(b300, backend="torch").latency(DECODE).us
    )


def test_each_fraction_is_the_mean_of_its_two_pinned_tables_fits():
    out = run_accuracy_python([str(ACCURACY / "int4_moe_vs_aic.py")])
    fitted = {}
    for line in out.splitlines()[1:]:
        system, engine, release, _floor, fraction = line.split()[:5]
        fitted[(system, engine, release)] = float(fraction)
    for system, tables in SOURCES.items():
        mean = sum(fitted[(system, *t)] for t in tables) / len(tables)
        assert INT4_EXPERTS_HBM_FRACTION[system] == pytest.approx(mean, abs=0.006)
    # the vLLM 0.18 / 0.19 rows (kernel_source vllm_marlin_int4_moe) read at a third of the others' rate
    slow = [v for (s, e, r), v in fitted.items() if e == "vllm" and re.match(r"0\.1[89]\.", r)]
    assert len(slow) == 4 and max(slow) < 0.3


def test_int4_cli_rejects_a_file_of_another_layout(tmp_path):
    bad = tmp_path / "rows.csv"
    bad.write_text("a,b\n1,2\n")
    err = run_accuracy_python([str(ACCURACY / "int4_moe_vs_aic.py"), "--csv", str(bad)], returncode=2)
    assert err.count("\n") == 1 and "--csv" in err and "Traceback" not in err


def test_the_marlin_choice_runs_int4_experts_on_hopper_only():
    assert MARLIN_INT4_MOE.runs(DECODE, compute_capability=90)
    assert not MARLIN_INT4_MOE.runs(DECODE, compute_capability=100)  # FlashInfer's MXINT4 where asked for
    assert not MARLIN_INT4_MOE.runs(DECODE._replace(dtype="mxfp4"), compute_capability=90)
