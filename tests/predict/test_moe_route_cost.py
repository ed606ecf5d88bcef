"""EngineProfile.eager_moe_route_us and moe_route_us: CPU time per MoE layer and per expert a token is routed
to in a step run outside CUDA graphs, which the GPU waits for only when its own work is shorter, and fixed GPU
time per MoE layer and routed expert in every step. Dense models pay neither."""

import pytest

from servelab.perfdb.db import perfdb_for
from servelab.predict.engines import engine_profile
from servelab.predict.graph import StepShape
from servelab.predict.serving import Workload, estimate_aggregated
from servelab.predict.step import priced_step
from servelab.specs import Parallel, load_model, load_system

H200 = load_system("h200_sxm")
DB = perfdb_for(H200, "trtllm")
MOE, DENSE = load_model("qwen3-30b-a3b"), load_model("llama-3.1-8b")
ROUTES = MOE.num_moe_layers * MOE.moe.experts_per_token  # 48 layers x 8 experts a token
TP8 = Parallel(tp=8)
# no per-kernel launch cost, so that the eager step's CPU time is the MoE layers' alone, and none of the MoE
# terms a calibration may set
BASE = engine_profile("trtllm").model_copy(
    update={
        "eager_launch_us": 0.0,
        "moe_prompt_token_us": 0.0,
        "eager_moe_route_us": 0.0,
        "moe_route_us": 0.0,
    }
)


def with_costs(cpu_us: float = 0.0, gpu_us: float = 0.0):
    return BASE.model_copy(update={"eager_moe_route_us": cpu_us, "moe_route_us": gpu_us})


def step(model, shape, engine, parallel=TP8):
    return priced_step(model, parallel, shape, engine, DB)


def test_an_eager_step_waits_for_the_moe_layers_cpu_when_its_kernels_are_shorter():
    shape = StepShape(prefill=((64, 0),))
    base = step(MOE, shape, BASE)
    cpu = 10 * base.kernel_us / ROUTES  # ten times the kernel time in all
    got = step(MOE, shape, with_costs(cpu_us=cpu))
    assert got.us - base.us == pytest.approx(ROUTES * cpu - base.kernel_us)


def test_the_moe_layers_cpu_is_hidden_under_longer_kernels():
    shape = StepShape(prefill=((8192, 0),))
    base = step(MOE, shape, BASE, Parallel())
    cpu = 0.5 * base.kernel_us / ROUTES  # half the kernel time in all
    assert step(MOE, shape, with_costs(cpu_us=cpu), Parallel()).us == base.us


def test_a_graphed_decode_step_does_not_pay_the_eager_cpu_and_an_eager_one_does():
    graphed = StepShape(decode_batch=8, decode_kv_len=2048)
    eager = StepShape(decode_batch=BASE.cuda_graph_max_batch + 1, decode_kv_len=2048)
    cost = with_costs(cpu_us=5000.0)
    assert step(MOE, graphed, cost).us == step(MOE, graphed, BASE).us
    assert step(MOE, eager, cost).us > step(MOE, eager, BASE).us


@pytest.mark.parametrize(
    "shape",
    [StepShape(decode_batch=8, decode_kv_len=2048), StepShape(prefill=((4096, 0),))],
    ids=["decode", "prefill"],
)
def test_every_step_pays_the_moe_layers_gpu_time(shape):
    got = step(MOE, shape, with_costs(gpu_us=40.0)).us - step(MOE, shape, BASE).us
    assert got == pytest.approx(40.0 * ROUTES)


def test_both_costs_are_per_expert_a_token_is_routed_to():
    top4 = MOE.model_copy(update={"moe": MOE.moe.model_copy(update={"experts_per_token": 4})})
    graphed, eager = StepShape(decode_batch=8, decode_kv_len=2048), StepShape(prefill=((64, 0),))
    for model, routes in ((MOE, ROUTES), (top4, ROUTES // 2)):
        got = step(model, graphed, with_costs(gpu_us=40.0)).us - step(model, graphed, BASE).us
        assert got == pytest.approx(40.0 * routes)
        base = step(model, eager, BASE)
        cpu = 10 * base.kernel_us / routes  # ten times the kernel time in all
        got = step(model, eager, with_costs(cpu_us=cpu)).us - base.us
        assert got == pytest.approx(routes * cpu - base.kernel_us)


def test_dense_models_pay_neither():
    cost = with_costs(cpu_us=5000.0, gpu_us=40.0)
    for shape in (StepShape(prefill=((64, 0),)), StepShape(decode_batch=8, decode_kv_len=2048)):
        assert step(DENSE, shape, cost).us == step(DENSE, shape, BASE).us


def test_the_simulator_first_token_waits_for_the_cpu_at_high_tp():
    wl = Workload(isl=1024, osl=32, concurrency=2, warmup=0, num_requests=4)
    a, b = (
        estimate_aggregated(MOE, H200, Parallel(tp=8), e, 2, 1024, 32, db=DB, workload=wl)
        for e in (BASE, with_costs(cpu_us=2000.0))
    )
    # one prompt step alone takes the layers' CPU time (its kernels are far shorter at tp8)
    assert b.ttft_ms - a.ttft_ms >= 0.9 * 2000.0 * ROUTES / 1000.0
