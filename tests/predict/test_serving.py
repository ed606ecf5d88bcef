"""The aggregated-serving simulator: against hand-computable cases, queueing laws, and the engine features."""

import pytest

from servelab.errors import ServelabError
from servelab.perfdb.db import perfdb_for
from servelab.predict.engines import engine_profile
from servelab.predict.graph import StepShape
from servelab.predict.plan.pareto import pareto_mask
from servelab.predict.serving import SpecDecoding, StepPricer, Workload, estimate_aggregated, simulate
from servelab.predict.serving.simulator import ClosedLoop
from servelab.predict.static import estimate_static, prepare
from servelab.predict.step import priced_step
from servelab.specs import Parallel, load_model, load_system

SYS = load_system("h200_sxm")
DB = perfdb_for(SYS)
QWEN = load_model("qwen3-32b")
TP2 = Parallel(tp=2)


def _sim(wl, model=QWEN, parallel=TP2, engine=None):
    engine = engine or engine_profile("vllm")
    mem = prepare(model, SYS, parallel, engine.max_num_batched_tokens)
    pricer = StepPricer(model, parallel, engine, DB, spec_tokens=wl.spec.draft_tokens)
    return simulate(model, parallel, engine, mem, wl, pricer)


def test_single_user_matches_one_prefill_and_decode_steps():
    """At concurrency 1 nothing queues: TTFT is one prefill step, TPOT the mean decode step over the
    context."""
    engine = engine_profile("vllm")
    sim = _sim(Workload(isl=2000, osl=200, concurrency=1, num_requests=8, range_ratio=0.0))
    prefill = priced_step(QWEN, TP2, StepShape(prefill=((2000, 0),)), engine, DB).us / 1000
    decode = priced_step(QWEN, TP2, StepShape(decode_batch=1, decode_kv_len=2100), engine, DB).us / 1000
    assert sim.metric("ttft_ms") == pytest.approx(prefill, rel=0.06)
    assert sim.metric("tpot_ms") == pytest.approx(decode, rel=0.03)
    # every request sees the same thing: the distribution is tight
    assert sim.metric("ttft_ms", "p99") == pytest.approx(sim.metric("ttft_ms", "p50"), rel=0.01)


def test_request_lengths_vary_around_the_mean_reproducibly():
    """Like vLLM's --random-range-ratio: lengths uniform in mean x [1 - r, 1 + r], the same for the same
    seed."""
    wl = Workload(isl=1000, osl=200, concurrency=4, num_requests=400, range_ratio=0.2)
    source = ClosedLoop(wl)
    reqs = [source._new() for _ in range(400)]
    prompts = [r.prompt for r in reqs]
    assert min(prompts) >= 800 and max(prompts) <= 1200 and len(set(prompts)) > 100
    assert sum(prompts) / len(prompts) == pytest.approx(1000, rel=0.03)
    again = ClosedLoop(wl)
    assert [again._new().prompt for _ in range(400)] == prompts


def test_closed_loop_obeys_littles_law():
    """Requests in flight = throughput x time in system, for the steady state the window measures."""
    wl = Workload(isl=1000, osl=300, concurrency=32, num_requests=200)
    sim = _sim(wl)
    in_flight = sim.request_tps[0] * sim.metric("e2el_ms") / 1000.0
    assert in_flight == pytest.approx(32, rel=0.08)
    # output tokens/s = requests/s x osl
    assert sim.output_tps[0] == pytest.approx(sim.request_tps[0] * 300, rel=0.08)


def test_estimates_steady_state_rates_are_littles_law_and_a_benchmarks_its_window():
    """`estimate --mode agg`'s steady state gives clients / mean E2EL requests/s and that x OSL tokens/s,
    which a window of 30 x C requests after 3 x C of warm-up measures within 5 %; a benchmark from idle (a
    given workload) keeps the rates its window counts, and says which it is."""
    engine = engine_profile("vllm")
    steady = estimate_aggregated(QWEN, SYS, TP2, engine, 64, 2048, 256, db=DB)
    rate = steady.request_throughput
    assert rate * steady.percentiles["e2el_ms"]["mean"] / 1000.0 == pytest.approx(64, rel=1e-9)
    assert steady.output_tokens_per_s_per_gpu * 2 == pytest.approx(rate * 256, rel=1e-9)
    assert steady.provenance["simulation"]["rates"].startswith("Little's law")
    long_run = _sim(Workload(isl=2048, osl=256, concurrency=64, warmup=3 * 64, num_requests=30 * 64))
    assert rate == pytest.approx(long_run.request_tps[0], rel=0.05)
    assert steady.output_tokens_per_s_per_gpu * 2 == pytest.approx(long_run.output_tps[0], rel=0.05)
    bench_wl = Workload(isl=2048, osl=256, concurrency=64, warmup=0, num_requests=128)
    bench = estimate_aggregated(QWEN, SYS, TP2, engine, 64, 2048, 256, db=DB, workload=bench_wl)
    window = _sim(bench_wl)
    assert bench.request_throughput == pytest.approx(window.request_tps[0], rel=1e-9)
    assert bench.provenance["simulation"]["rates"] == "counted over the measuring window"


def test_chunked_prefill_splits_long_prompts_over_the_token_budget():
    small = engine_profile("vllm", max_num_batched_tokens=1024)
    # fixed lengths: a 4096-token prompt is exactly four 1024-token chunks
    sim = _sim(Workload(isl=4096, osl=16, concurrency=1, num_requests=4, range_ratio=0.0), engine=small)
    chunks = (
        sum(
            priced_step(QWEN, TP2, StepShape(prefill=((1024, past),)), small, DB).us
            for past in (0, 1024, 2048, 3072)
        )
        / 1000
    )
    assert sim.metric("ttft_ms") == pytest.approx(chunks, rel=0.08)
    whole = _sim(Workload(isl=4096, osl=16, concurrency=1, num_requests=4, range_ratio=0.0))
    assert sim.metric("ttft_ms") > whole.metric("ttft_ms")  # four launches cost more than one


def test_kv_capacity_admission_and_preemption():
    """Past the KV capacity, extra requests wait (TTFT grows) and throughput stops growing."""
    model = load_model("llama-3.1-70b")
    par = Parallel(tp=2)
    engine = engine_profile("vllm")
    mem = prepare(model, SYS, par, engine.max_num_batched_tokens)
    fit = mem.max_sequences(8192 + 1024, model, par)
    assert 4 < fit < 256
    under = _sim(Workload(isl=8192, osl=1024, concurrency=fit // 2, num_requests=64), model, par)
    over = _sim(Workload(isl=8192, osl=1024, concurrency=fit * 3, num_requests=3 * fit), model, par)
    assert over.stats.blocked_kv + over.stats.preemptions > 0
    assert under.stats.blocked_kv == 0 and under.stats.preemptions == 0
    assert over.stats.peak_kv_frac > 0.95
    assert over.metric("ttft_ms") > 3 * under.metric("ttft_ms")
    mean_batch = over.stats.decode_token_steps / over.stats.decode_steps
    # never more running than the cache holds (sequences mid-generation are shorter than isl + osl)
    assert mean_batch <= fit * (8192 + 1024) / 8192


def test_speculative_decoding_cuts_tpot_with_acceptance():
    base = _sim(Workload(isl=1000, osl=256, concurrency=8, num_requests=32))
    good = _sim(
        Workload(
            isl=1000,
            osl=256,
            concurrency=8,
            num_requests=32,
            spec=SpecDecoding(draft_tokens=2, acceptance=0.8),
        )
    )
    none = _sim(
        Workload(
            isl=1000,
            osl=256,
            concurrency=8,
            num_requests=32,
            spec=SpecDecoding(draft_tokens=2, acceptance=0.0),
        )
    )
    assert SpecDecoding(draft_tokens=2, acceptance=0.8).tokens_per_step == pytest.approx(1 + 0.8 + 0.64)
    assert good.metric("tpot_ms") < 0.75 * base.metric("tpot_ms")
    assert none.metric("tpot_ms") >= base.metric("tpot_ms")  # verifying drafts that all fail costs time


def test_prefix_cache_hits_skip_prefill_compute():
    cold = _sim(Workload(isl=4000, osl=64, concurrency=4, num_requests=16))
    warm = _sim(Workload(isl=4000, osl=64, concurrency=4, num_requests=16, prefix_hit_rate=0.75))
    # 75 % of the prompt skips compute; attention still reads the cached prefix, and the step overhead stays
    assert warm.metric("ttft_ms") < 0.6 * cold.metric("ttft_ms")


def test_open_loop_queueing_grows_with_load_and_burstiness():
    # a scheduler forming each step when the last ends: at light load a request waits for little more than
    # the step under way (with async scheduling it also waits for the step formed ahead: test_scheduler)
    sync = engine_profile("vllm", async_scheduling=False)
    light = _sim(Workload(isl=1000, osl=100, rate=0.5, num_requests=60), engine=sync)
    single = _sim(Workload(isl=1000, osl=100, concurrency=1, num_requests=8), engine=sync)
    assert light.metric("ttft_ms") == pytest.approx(single.metric("ttft_ms"), rel=0.25)
    capacity = _sim(Workload(isl=1000, osl=100, concurrency=256, num_requests=300)).request_tps[0]
    smooth = _sim(Workload(isl=1000, osl=100, rate=0.7 * capacity, num_requests=300, seed=1))
    bursty = _sim(Workload(isl=1000, osl=100, rate=0.7 * capacity, burstiness=0.25, num_requests=300, seed=1))
    over = _sim(Workload(isl=1000, osl=100, rate=1.5 * capacity, num_requests=300))
    assert bursty.metric("ttft_ms", "p99") > smooth.metric("ttft_ms", "p99")
    # past capacity the engine admits everyone it can hold, so the backlog shows in the batch: E2EL balloons
    assert over.metric("e2el_ms") > 2 * smooth.metric("e2el_ms")
    assert over.metric("tpot_ms") > smooth.metric("tpot_ms")
    assert over.request_tps[0] < 1.1 * capacity


def test_bands_bracket_the_nominal_values():
    sim = _sim(Workload(isl=2000, osl=200, concurrency=16, num_requests=64))
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        assert sim.metric(metric, "mean", 1) < sim.metric(metric) < sim.metric(metric, "mean", 2)
    assert sim.output_tps[2] < sim.output_tps[0] < sim.output_tps[1]


def test_dp_attention_spreads_requests_over_ranks():
    model = load_model("deepseek-ai/DeepSeek-V3")
    par = Parallel(tp=8, ep=8, dp_attn=True)
    sim = _sim(Workload(isl=2000, osl=200, concurrency=64, num_requests=128), model, par)
    assert sim.lanes == 8 and sim.lane_workload.concurrency == 8
    assert sim.stats.decode_token_steps / sim.stats.decode_steps <= 8.01


def test_thousand_requests_simulate():
    """All 1,000 requests finish; how fast is a benchmark (benchmarks/speed.py), not a test."""
    sim = _sim(Workload(isl=1000, osl=200, concurrency=64, num_requests=1000))
    assert sim.requests >= 1000


def test_estimate_aggregated_keeps_static_fields_and_adds_percentiles():
    engine = engine_profile("vllm")
    static = estimate_static(QWEN, SYS, TP2, engine, 16, 2000, 200).model_dump()
    agg = estimate_aggregated(QWEN, SYS, TP2, engine, 16, 2000, 200).model_dump()
    assert set(static) <= set(agg)
    assert agg["mode"] == "agg" and agg["batch"] == 16
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        assert set(agg["percentiles"][metric]) == {"mean", "p50", "p90", "p99"}
        assert agg["percentiles_low"][metric]["mean"] <= agg["percentiles_high"][metric]["mean"]
    assert agg["ttft_ms_low"] <= agg["ttft_ms"] <= agg["ttft_ms_high"]
    # steady state sits between one lone prefill and the static all-at-once prefill of 16
    assert agg["ttft_ms"] < static["ttft_ms"]
    assert agg["tpot_ms"] >= 0.95 * static["tpot_ms"]


def test_engine_overrides_change_the_schedule():
    engine = engine_profile("vllm", max_num_seqs=4)
    agg = estimate_aggregated(QWEN, SYS, TP2, engine, 16, 1000, 100)
    assert agg.scheduler["admissions_blocked_by_max_num_seqs"] > 0
    assert agg.scheduler["mean_decode_batch_per_lane"] <= 4


def test_one_sequence_that_does_not_fit_is_an_error():
    with pytest.raises(ServelabError, match="KV cache"):
        estimate_aggregated(
            load_model("deepseek-ai/DeepSeek-V3"),
            SYS,
            Parallel(tp=8),
            engine_profile("vllm"),
            1,
            2_000_000,
            100,
        )


def test_workload_needs_exactly_one_load():
    with pytest.raises(ServelabError, match="exactly one"):
        Workload(isl=10, osl=10)
    with pytest.raises(ServelabError, match="exactly one"):
        Workload(isl=10, osl=10, concurrency=2, rate=1.0)


def test_pareto_mask():
    pts = [(10, 1), (5, 5), (1, 10), (4, 4), (10, 1), (6, 0.5)]
    assert pareto_mask(pts) == [True, True, True, False, False, False]
