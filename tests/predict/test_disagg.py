"""Disaggregated serving: pool splits, rate matching, KV transfer."""

import pytest

from servelab.errors import ServelabError
from servelab.predict.plan import PlanRequest, make_plan
from servelab.predict.plan.disagg import kv_transfer_s


@pytest.fixture(scope="module")
def flash_disagg():
    return make_plan(
        PlanRequest(
            model="sgl-project/DeepSeek-V4-Flash-FP8",
            gpus=8,
            isl=8192,
            osl=1024,
            ttft_ms=3000,
            tpot_ms=40,
            mode="disagg",
        )
    )


def test_pools_fit_the_gpus_and_rate_match(flash_disagg):
    assert flash_disagg.candidates
    for c in flash_disagg.candidates:
        assert c.mode == "disagg" and c.prefill and c.decode
        used = c.prefill.workers * c.prefill.gpus_per_worker + c.decode.workers * c.decode.gpus_per_worker
        assert used == c.gpus <= 8
        assert c.ttft_ms > c.prefill.ttft_ms + c.kv_transfer_ms  # plus the decode worker's first step
        assert c.meets_sla and c.tpot_ms <= 40 and c.ttft_ms <= 3000
        assert c.concurrency == c.decode.workers * c.decode.concurrency_per_worker
        # the prefill pool keeps up: its workers see a rate below their saturated capacity
        assert c.point.disagg.prefill_rate > 0
        # every request served delivers its OSL tokens: the output rate is the request rate's (the decode
        # workers' short measuring window had counted more requests than their tokens made)
        assert c.tok_s_per_gpu * c.gpus == pytest.approx(c.request_rate * 1024)


def test_kv_transfer_uses_nvlink_inside_the_node_and_network_across(flash_disagg):
    c = flash_disagg.candidates[0]
    ctx, p = flash_disagg.context, c.point
    inside, link_in = kv_transfer_s(ctx, p.disagg.prefill, p.config, 8)
    across, link_out = kv_transfer_s(ctx, p.disagg.prefill, p.config, 16)
    assert (link_in, link_out) == ("nvlink", "network")
    assert across > 5 * inside
    # 8K tokens of DeepSeek-V4 KV over NVLink: well under a millisecond to a few ms, not seconds
    assert 1e-5 < inside < 0.05


@pytest.mark.slow  # 2.0 s of CPU a case: a whole plan search
def test_both_modes_rank_together():
    plan = make_plan(
        PlanRequest(
            model="sgl-project/DeepSeek-V4-Flash-FP8",
            gpus=8,
            isl=8192,
            osl=1024,
            ttft_ms=3000,
            tpot_ms=40,
            mode="both",
            top=500,  # every configuration that meets the SLA, whichever mode the calibration puts first
        )
    )
    assert {c.mode for c in plan.candidates} == {"agg", "disagg"}
    assert [c.rank for c in plan.candidates] == sorted(c.rank for c in plan.candidates)


def test_no_split_when_one_replica_needs_every_gpu():
    with pytest.raises(ServelabError, match="no prefill \\+ decode split fits in 8 GPUs.*mode agg"):
        make_plan(PlanRequest(model="deepseek-ai/DeepSeek-V3", gpus=8, isl=4000, osl=1000, mode="disagg"))
