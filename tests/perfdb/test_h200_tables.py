"""The shipped H200 torch tables hold a measured row for every MoE and GEMM key a default campaign plans,
wherever torch has a kernel for it (collect/ops/moe.py, gemm.py): the tables and the planner agree."""

from servelab.collect.campaign import CampaignConfig, plan_campaign
from servelab.collect.cases import default_models
from servelab.perfdb.tables import data_root, load_tables
from servelab.specs import load_model, load_system

H200 = load_system("h200_sxm")
TABLES = data_root() / "h200_sxm" / "torch" / "2.11.0"
# embedded models whose keys the tables do not hold yet, and why: a collection run on an H200 is owed
NOT_YET_COLLECTED = {
    "kimi-k2.5": "embedded 2026-12-07 (nineteenth session) with no H200 free to collect its 26 bf16 GEMM "
    "shapes (338 keys): until then they are interpolated or extrapolated, and say so",
    "glm-5": "embedded 2026-12-07 (nineteenth session): its GEMM and MoE shapes are planned for the next "
    "campaign and priced by the roofline until then (docs/accuracy.md, \"GLM-5 embedded, with DeepSeek's "
    'sparse attention")',
    "qwen3.5-397b-a17b": "embedded 2026-12-07 (twentieth session): its GEMM and MoE shapes (hidden 4096, 512 "
    "experts of 1024) were never collected and are priced by the roofline until a campaign runs them "
    '(docs/accuracy.md, "Qwen3.5-397B-A17B embedded")',
}


def has_torch_kernel(key) -> bool:
    if key.op == "moe":
        return key.dtype in ("bf16", "fp8", "fp8_block")  # no grouped MXFP4 kernel in torch on Hopper
    # cuBLAS blockwise FP8 is only run for K divisible by 512 (collect/ops/gemm.py)
    return key.dtype != "fp8_block" or key.k % 512 == 0


def collected_models() -> tuple[str, ...]:
    """The default campaign's models (and their checkpoints), less those embedded after the H200 tables were
    collected (NOT_YET_COLLECTED, each with its reason)."""
    return tuple(name for name in default_models() if load_model(name).name not in NOT_YET_COLLECTED)


def test_every_planned_moe_and_gemm_key_with_a_kernel_is_measured(tmp_path):
    tables = load_tables(TABLES, H200)
    plan = plan_campaign(CampaignConfig(out=tmp_path / "c", ops=("moe", "gemm"), models=collected_models()))
    keys = [k for k in plan.keys if has_torch_kernel(k)]
    missing = [k for k in keys if tables.lookup(k).source != "measured"]
    assert keys and not missing, f"{len(missing)} of {len(keys)} keys not measured, e.g. {missing[:3]}"
    # the FP8 checkpoints' own rows are there: Qwen3-235B-A22B-FP8's experts, FP8 GEMMs on the small-M grid
    assert any(
        k.op == "moe" and k.dtype == "fp8_block" and (k.hidden, k.experts) == (4096, 128) for k in keys
    )
    assert any(k.op == "gemm" and k.dtype == "fp8" and k.m == 24 for k in keys)
