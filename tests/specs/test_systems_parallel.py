import pytest

from servelab.errors import ServelabError
from servelab.specs import Parallel, check_precision, list_systems, load_model, load_system


def test_systems_and_measured_ceilings():
    assert list_systems() == [
        "h100_sxm",
        "h200_sxm",
        "b200_sxm",
        "b300_sxm",
        "gb200",
        "gb300",
        "mi300x",
        "mi325x",
        "mi355x",
        "rtx_pro_6000",
    ]
    h200 = load_system("h200_sxm")
    assert h200.ceiling("gemm_bf16_tflops", 989) == (680, "measured")
    assert load_system("b200_sxm").ceiling("gemm_bf16_tflops", 2250) == (2250, "datasheet")
    assert load_system("gb200").nvlink_domain == 72
    with pytest.raises(ServelabError, match="did you mean h200_sxm"):
        load_system("h200_sx")


def test_amd_and_rtx_pro_systems_say_what_they_run():
    # CDNA 3 has FP8 but no FP4; CDNA 4 (MI355X) and the RTX PRO 6000 (SM120) have FP4 tensor cores.
    mi300x, mi355x, rtx = load_system("mi300x"), load_system("mi355x"), load_system("rtx6000pro")
    assert not mi300x.supports_fp4 and mi355x.supports_fp4 and rtx.supports_fp4
    assert mi300x.compute_capability == 0 and rtx.compute_capability == 120
    assert all("datasheet" in load_system(n).source for n in ("mi300x", "mi325x", "mi355x", "rtx_pro_6000"))
    with pytest.raises(ServelabError, match=r"gfx942 \(CDNA 3\)\) lacks"):
        check_precision(load_model("deepseek-ai/DeepSeek-V4-Pro"), mi300x)


def test_fp4_on_hopper_points_to_the_fp8_conversion():
    with pytest.raises(ServelabError, match="sgl-project/DeepSeek-V4-Pro-FP8"):
        check_precision(load_model("deepseek-ai/DeepSeek-V4-Pro"), load_system("h200_sxm"))
    check_precision(load_model("deepseek-ai/DeepSeek-V4-Pro"), load_system("b200_sxm"))
    check_precision(load_model("sgl-project/DeepSeek-V4-Pro-FP8"), load_system("h200_sxm"))


def test_parallel_derived_sizes():
    p = Parallel(tp=8, ep=8, dp_attn=True)
    assert (p.gpus, p.attn_tp, p.attn_dp, p.moe_tp, p.moe_ep) == (8, 1, 8, 1, 8)
    p = Parallel(tp=8, ep=2, pp=2)
    assert (p.gpus, p.attn_tp, p.moe_tp) == (16, 8, 4)
    assert Parallel(tp=16).kv_heads_local(load_model("llama-3.1-70b")) == 1


@pytest.mark.parametrize(
    "parallel, message",
    [
        (Parallel(tp=3), "power of two"),
        (Parallel(tp=128), "attention heads do not divide"),
        (Parallel(tp=8, ep=3), "must divide tp"),
        (Parallel(tp=2, ep=2, dp_attn=False), None),
    ],
)
def test_parallel_validation_moe(parallel, message):
    model = load_model("qwen3-30b-a3b")
    if message is None:
        parallel.validate(model)
    else:
        with pytest.raises(ServelabError, match=message):
            parallel.validate(model)


def test_parallel_validation_dense():
    with pytest.raises(ServelabError, match="needs a MoE model"):
        Parallel(tp=2, ep=2).validate(load_model("llama-3.1-8b"))


def test_mxfp4_runs_weight_only_on_hopper_nvfp4_does_not():
    check_precision(load_model("gpt-oss-120b"), load_system("h200_sxm"))
    with pytest.raises(ServelabError, match="FP4 tensor cores"):
        check_precision(load_model("nvidia/DeepSeek-V4-Pro-NVFP4"), load_system("h100_sxm"))
