"""One given disaggregated split (predict.plan.split): the planner's own pricing for a split whose prefill
pool keeps up, Little's law for one whose prefill pool binds."""

from dataclasses import replace

import pytest

from servelab.errors import ServelabError
from servelab.predict.engines import engine_profile
from servelab.predict.plan import PlanRequest, make_plan
from servelab.predict.plan.configs import make_config
from servelab.predict.plan.disagg import decode_load, decode_worker
from servelab.predict.plan.split import (
    Split,
    first_wave_ms,
    pool_config,
    price_given_split,
    split_context,
)
from servelab.predict.serving.aggregated import simulate
from servelab.specs import Parallel, load_model, load_system

MODEL, SYSTEM, ISL, OSL = "llama-3.1-8b", "h200_sxm", 2048, 256


def _price(split: Split, concurrency: int, backend: str = "vllm"):
    system = load_system(SYSTEM)
    engine = engine_profile(backend, system.hbm_gib)
    model = engine.model_as_served(load_model(MODEL))
    ctx = split_context(model, system, engine, split, ISL, OSL)
    return ctx, price_given_split(ctx, split, concurrency)


@pytest.fixture(scope="module")
def plan():
    return make_plan(
        PlanRequest(model=MODEL, system=SYSTEM, gpus=4, isl=ISL, osl=OSL, ttft_ms=None, tpot_ms=None,
                    mode="disagg", top=50)
    )  # fmt: skip


def test_a_planned_split_prices_as_the_planner_priced_it(plan):
    checked = 0
    for c in plan.candidates[:4]:
        d = c.point.disagg
        split = Split(d.prefill.parallel, d.prefill_workers, c.point.config.parallel, c.replicas)
        _, got = _price(split, c.concurrency)
        assert got.bound == "decode"
        assert got.point.ttft == c.point.ttft and got.point.tpot == c.point.tpot
        assert got.request_rate == pytest.approx(c.request_rate, rel=1e-12)
        assert got.prefill_ms == pytest.approx(d.prefill_ttft_ms)
        assert got.transfer_ms == pytest.approx(d.kv_transfer_ms)
        # the TTFT is its three parts
        assert got.prefill_ms + got.transfer_ms + got.first_step_ms == pytest.approx(got.point.ttft[0])
        checked += 1
    assert checked >= 2


def test_a_prefill_bound_split_runs_at_the_prefill_pools_rate():
    # one single-GPU prefill worker for three decode workers, long prompts, many clients
    split = Split(Parallel(tp=1), 1, Parallel(tp=1), 3)
    ctx, got = _price(split, 384)
    assert got.bound == "prefill"
    assert got.request_rate == pytest.approx(got.prefill_capacity)
    # Little's law: every client spends clients / rate seconds per request, TTFT is that less the decode
    p = got.point
    in_system_ms = 384 / got.request_rate * 1000.0
    assert p.ttft[0] == pytest.approx(in_system_ms - (OSL - 1) * p.tpot[0])
    assert got.prefill_ms > 10 * got.first_step_ms  # the queue waits at the prefill pool
    # the decode workers hold only what the prefill pool feeds them, fewer than the clients
    assert p.concurrency < 384
    # the same split with few clients keeps up
    _, light = _price(split, 6)
    assert light.bound == "decode" and light.point.ttft[0] < p.ttft[0]


def test_kv_crosses_the_network_when_the_pools_outgrow_the_node():
    inside = _price(Split(Parallel(tp=2), 2, Parallel(tp=2), 2), 16)[1]
    across = _price(Split(Parallel(tp=4), 2, Parallel(tp=4), 2), 16)[1]
    assert inside.point.disagg.link == "nvlink" and across.point.disagg.link == "network"


@pytest.mark.parametrize(
    ("split", "clients", "field", "says"),
    [
        (Split(Parallel(tp=1), 1, Parallel(tp=1), 1), 0, "batch", "at least 1"),
        (Split(Parallel(tp=1, ep=2), 1, Parallel(tp=1), 1), 4, "prefill_tp", "prefill pool"),
        (Split(Parallel(tp=1), 1, Parallel(tp=64), 1), 4, "decode_tp", "decode pool"),
    ],
)
def test_a_split_that_cannot_serve_names_its_pool(split, clients, field, says):
    with pytest.raises(ServelabError) as err:
        _price(split, clients)
    assert err.value.field == field and says in err.value.message


@pytest.mark.parametrize("backend", ["sglang", "trtllm", "vllm"])
def test_the_decode_workers_part_of_ttft_is_its_take_up_or_a_prompt_step_by_engine(backend):
    """SGLang's and TensorRT-LLM's decode workers take the prefill worker's first token and join the decode
    batch: their part of TTFT is the wait for the decode step in progress (half a step on the mean), and no
    step of theirs carries a prompt token. vLLM's computes the last prompt token again in a prompt step."""
    split = Split(Parallel(tp=1), 1, Parallel(tp=1), 1)
    ctx, got = _price(split, 8, backend)
    assert got.bound == "decode"
    sim = got.point.sim
    step_ms = sim.metric("itl_ms")
    eager_ms = got.point.config.pricer.mixed([(1, ISL)], 0, 0.0)[0] / 1000.0  # a one-token prompt step
    if backend == "vllm":
        assert sim.stats.prefill_tokens > 0 and sim.stats.busy_mixed_s > 0
        assert got.first_step_ms == pytest.approx(sim.metric("ttft_ms"))
        assert got.first_step_ms >= eager_ms
    else:
        assert sim.stats.prefill_tokens == 0 and sim.stats.busy_mixed_s == 0
        assert sim.metric("ttft_ms") == 0.0  # a closed loop: the arrival joins at a step's end
        assert got.first_step_ms == pytest.approx(0.5 * step_ms)
        assert got.first_step_ms < eager_ms


def test_a_decode_workers_cuda_graphs_cover_every_batch_it_holds():
    """The benchmarked decode workers capture graphs up to their batch limit (srt-slurm's recipes), so a
    batch past the engine's aggregated default replays a graph there and launches eagerly elsewhere."""
    system = load_system(SYSTEM)
    engine = engine_profile("trtllm", system.hbm_gib).model_copy(update={"cuda_graph_max_batch": 16})
    split = Split(Parallel(tp=1), 1, Parallel(tp=1), 1)
    ctx = split_context(load_model(MODEL), system, engine, split, ISL, OSL)
    cfg = make_config(ctx, Parallel(tp=1))
    worker = decode_worker(ctx, cfg)
    default = cfg.pricer.engine.cuda_graph_max_batch
    assert cfg.cap_lane > default  # the aggregated default does not cover this worker's batch
    assert worker.pricer.engine.cuda_graph_max_batch == cfg.cap_lane
    assert worker.parallel == cfg.parallel and worker.cap_lane == cfg.cap_lane
    past = default * 4
    assert worker.pricer.decode(past, ISL)[0] < cfg.pricer.decode(past, ISL)[0]  # graphed vs eager
    assert worker.pricer.decode(default, ISL) == cfg.pricer.decode(default, ISL)  # both graphed
    # a worker whose engine already covers its batch is kept as it is
    small = replace(cfg, cap_lane=default // 2)
    assert decode_worker(ctx, small) is small


def test_first_wave_prefills_the_clients_one_after_another():
    # 4 clients on 2 workers at 10 requests/s each: each worker's prompts finish at 100 and 200 ms
    assert first_wave_ms(4, 2, 10.0, 50.0) == pytest.approx(150.0)
    # none faster than the steady state
    assert first_wave_ms(4, 2, 10.0, 150.0) == pytest.approx((150.0 + 200.0) / 2)
    assert first_wave_ms(4, 2, 10.0, 500.0) == pytest.approx(500.0)
    # an odd share rounds up: 3 prompts on one worker of the two
    assert first_wave_ms(5, 2, 10.0, 0.0) == pytest.approx(200.0)


def test_a_benchmark_from_idle_adds_its_first_waves_share_to_ttft_only():
    split = Split(Parallel(tp=1), 2, Parallel(tp=1), 1)
    ctx, steady = _price(split, 32)
    assert steady.bound == "decode"
    once = price_given_split(ctx, split, 32, num_prompts=32)
    tenfold = price_given_split(ctx, split, 32, num_prompts=320)
    assert once.point.tpot == steady.point.tpot and tenfold.point.tpot == steady.point.tpot
    wave = first_wave_ms(32, 2, once.prefill_capacity / 2, steady.prefill_ms)  # 16 prompts on each worker
    assert wave > 2 * steady.prefill_ms  # the first wave queues
    assert once.prefill_ms == pytest.approx(wave)
    assert once.point.ttft[0] - steady.point.ttft[0] == pytest.approx(wave - steady.prefill_ms)
    assert tenfold.point.ttft[0] - steady.point.ttft[0] == pytest.approx((wave - steady.prefill_ms) / 10)
    # TTFT is still its three parts
    assert tenfold.prefill_ms + tenfold.transfer_ms + tenfold.first_step_ms == pytest.approx(
        tenfold.point.ttft[0]
    )
    with pytest.raises(ServelabError) as err:
        price_given_split(ctx, split, 32, num_prompts=0)
    assert err.value.field == "num_prompts"


@pytest.mark.parametrize(("backend", "clients"), [("vllm", 16), ("sglang", 64), ("trtllm", 32)])
def test_a_decode_workers_rate_is_its_steady_state_by_littles_law(backend, clients):
    """The rate decode_load gives a decode worker holds Little's law on the simulation's own latencies
    (clients in flight = rate x mean E2EL) and is the steady state's: a window of 30 x C requests after 3 x C
    of warm-up measures it within 5 % (the short window it was read from was 16-29 % above Little's law
    here)."""
    split = Split(Parallel(tp=1), 1, Parallel(tp=1), 1)
    system = load_system(SYSTEM)
    engine = engine_profile(backend, system.hbm_gib)
    ctx = split_context(engine.model_as_served(load_model(MODEL)), system, engine, split, ISL, OSL)
    cfg = decode_worker(ctx, pool_config(ctx, split.decode, "decode"))
    load = decode_load(ctx, cfg, clients)
    sim = load.sim
    for k in range(3):
        in_flight = sim.request_tps[k] * sim.metric("e2el_ms", "mean", k) / 1000.0
        assert in_flight == pytest.approx(clients, rel=1e-9)
        assert sim.output_tps[k] == pytest.approx(sim.request_tps[k] * OSL)
    long_run = ctx.workload(clients, cfg.lanes).model_copy(
        update={"num_requests": 30 * clients, "warmup": 3 * clients}
    )
    steady = simulate(ctx.model, cfg.parallel, ctx.engine, cfg.mem, long_run, cfg.pricer, prefilled=True)
    assert sim.request_tps[0] == pytest.approx(steady.request_tps[0], rel=0.05)
