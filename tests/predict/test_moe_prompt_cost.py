"""EngineProfile.moe_prompt_token_us: every prompt token a step carries pays it once per MoE layer, in the
step model itself, so prefill steps, mixed steps and the simulator all see it; decode tokens and dense models
do not."""

import pytest

from servelab.perfdb.db import perfdb_for
from servelab.predict.engines import engine_profile
from servelab.predict.graph import StepShape
from servelab.predict.serving import Workload, estimate_aggregated
from servelab.predict.static import estimate_static
from servelab.predict.step import priced_step
from servelab.specs import Parallel, load_model, load_system

H200 = load_system("h200_sxm")
DB = perfdb_for(H200, "vllm")
COST_US = 0.5
MOE, DENSE = load_model("qwen3-30b-a3b"), load_model("llama-3.1-8b")


@pytest.fixture(scope="module")
def engines():
    base = engine_profile("vllm")
    return base.model_copy(update={"moe_prompt_token_us": 0.0}), base.model_copy(
        update={"moe_prompt_token_us": COST_US}
    )


def extra_us(model, parallel, shape, engines):
    without, with_cost = engines
    return (
        priced_step(model, parallel, shape, with_cost, DB).us
        - priced_step(model, parallel, shape, without, DB).us
    )


@pytest.mark.parametrize("parallel", [Parallel(), Parallel(tp=4), Parallel(tp=2, pp=2)], ids=str)
def test_a_moe_prompt_step_pays_tokens_times_moe_layers(parallel, engines):
    shape = StepShape(prefill=((1500, 0), (300, 700)))
    assert MOE.num_moe_layers > 0
    assert extra_us(MOE, parallel, shape, engines) == pytest.approx(1800 * MOE.num_moe_layers * COST_US)


def test_a_mixed_step_pays_for_its_prompt_tokens_only(engines):
    shape = StepShape(prefill=((512, 0),), decode_batch=64, decode_kv_len=2000)
    assert extra_us(MOE, Parallel(tp=2), shape, engines) == pytest.approx(512 * MOE.num_moe_layers * COST_US)


def test_attention_dp_ranks_pay_for_their_own_prompt_tokens(engines):
    # four prompts over four attention ranks: each rank (and so the step) carries one
    shape = StepShape(prefill=((1000, 0),) * 4)
    parallel = Parallel(tp=4, ep=4, dp_attn=True)
    assert extra_us(MOE, parallel, shape, engines) == pytest.approx(1000 * MOE.num_moe_layers * COST_US)


def test_decode_steps_and_dense_models_do_not_pay(engines):
    decode = StepShape(decode_batch=32, decode_kv_len=4096)
    assert extra_us(MOE, Parallel(tp=2), decode, engines) == 0.0
    assert extra_us(DENSE, Parallel(), StepShape(prefill=((2000, 0),)), engines) == 0.0


def test_static_estimate_ttft_moves_by_the_cost_and_tpot_does_not(engines):
    without, with_cost = engines
    a = estimate_static(MOE, H200, Parallel(tp=2), without, 2, 1000, 64, db=DB)
    b = estimate_static(MOE, H200, Parallel(tp=2), with_cost, 2, 1000, 64, db=DB)
    assert b.ttft_ms - a.ttft_ms == pytest.approx(2 * 1000 * MOE.num_moe_layers * COST_US / 1000)
    assert b.tpot_ms == a.tpot_ms


def test_the_simulator_sees_the_cost_on_moe_models_only(engines):
    without, with_cost = engines
    wl = Workload(isl=2000, osl=32, concurrency=4, warmup=0, num_requests=8)
    for model, moves in ((MOE, True), (DENSE, False)):
        a, b = (
            estimate_aggregated(model, H200, Parallel(tp=2), e, 4, 2000, 32, db=DB, workload=wl)
            for e in (without, with_cost)
        )
        # one prompt alone costs 2000 tokens x layers x the cost; queued prompts wait for others' too
        floor = 2000 * model.num_moe_layers * COST_US / 1000
        assert (b.ttft_ms - a.ttft_ms >= floor) if moves else (b.ttft_ms == a.ttft_ms)
