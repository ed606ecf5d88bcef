"""`--explain` (servelab.predict.serving.ttft_explain): a predicted TTFT split into the API server, the queue,
its own prefill steps term by term and the first token's streaming. The split adds up to the TTFT the
estimate and the twin report, each logged step's terms add up to the price the simulation gave it, and
asking for the split changes no other answer."""

import json

import pytest

from servelab.perfdb.db import perfdb_for
from servelab.predict.engines import engine_profile, fitted_params
from servelab.predict.graph import StepShape, step_ops
from servelab.predict.serving import StepPricer, Workload, estimate_aggregated, simulate
from servelab.predict.serving.ttft_explain import StepLog, TermPricer, watcher
from servelab.predict.static import prepare
from servelab.predict.step import kernel_sum_by_category, priced_step, step_terms
from servelab.predict.twin import BenchStream, EngineSettings, simulate_benchmark
from servelab.specs import Parallel, load_model, load_system

H200 = load_system("h200_sxm")
DENSE, MOE = load_model("llama-3.1-8b"), load_model("qwen3-30b-a3b")


def estimate(engine_name, model, parallel, clients, isl=2048, osl=64, engine=None, fitted=None, **kw):
    engine = engine or engine_profile(engine_name, H200.hbm_gib, gpu_name=H200.gpu_name)
    fitted = fitted_params(engine_name) if fitted is None else fitted
    return estimate_aggregated(model, H200, parallel, engine, clients, isl, osl, explain=fitted, **kw)


def rows(ex, part=None):
    return [r for r in ex["rows"] if part is None or r["part"] == part]


def total(ex, stat):
    return sum(r[f"{stat}_ms"] for r in ex["rows"])


CASES = [
    ("vllm", DENSE, Parallel(), 1),
    ("vllm", DENSE, Parallel(), 48),
    ("sglang", MOE, Parallel(tp=2), 16),  # a serial output stream: the first token waits in it
    ("trtllm", MOE, Parallel(tp=4, ep=4), 32),  # calibrated MoE terms, eager CPU the GPU waits for
    ("vllm", MOE, Parallel(tp=2, dp_attn=True), 24),  # attention DP: lanes
]


@pytest.mark.parametrize(("engine", "model", "parallel", "clients"), CASES)
def test_the_split_adds_up_to_the_predicted_mean_and_median_ttft(engine, model, parallel, clients):
    got = estimate(engine, model, parallel, clients)
    ex = got.explain
    assert ex["ttft_ms"]["mean"] == pytest.approx(got.ttft_ms, rel=1e-12)
    assert ex["ttft_ms"]["median"] == pytest.approx(got.percentiles["ttft_ms"]["p50"], rel=1e-12)
    assert total(ex, "mean") == pytest.approx(got.ttft_ms, rel=1e-9)
    assert total(ex, "median") == pytest.approx(got.percentiles["ttft_ms"]["p50"], rel=1e-9)
    assert sum(r["mean_share"] for r in ex["rows"]) == pytest.approx(1.0, rel=1e-9)
    assert all(r["source"] for r in ex["rows"])


def test_an_open_loop_adds_up_too():
    got = estimate("vllm", DENSE, Parallel(), 1, rate=8.0, num_requests=64)
    assert total(got.explain, "mean") == pytest.approx(got.ttft_ms, rel=1e-9)


def test_one_request_on_an_idle_engine_has_no_queue_and_no_wait():
    wl = Workload(isl=4096, osl=16, concurrency=1, warmup=0, num_requests=1, range_ratio=0.0)
    ex = estimate("vllm", DENSE, Parallel(), 1, workload=wl).explain
    assert ex["requests"] == 1
    assert not rows(ex, "queue")
    assert [r["term"] for r in rows(ex, "API server")] == ["intake (api_request_us, api_prompt_token_us)"]
    # the intake is the API server's documented cost of this prompt: 1 ms + 1 us a prompt token
    engine = engine_profile("vllm")
    intake = rows(ex, "API server")[0]["mean_ms"]
    assert intake == pytest.approx((engine.api_request_us + 4096 * engine.api_prompt_token_us) / 1000)
    # then its one prefill step (a 4K prompt within the 8K budget), kernels and engine terms, and the API
    # server's handling of that step's output, its first token (vLLM's serial output stream)
    assert {r["part"] for r in ex["rows"]} == {"API server", "prefill steps", "first token"}
    streamed = rows(ex, "first token")[0]["mean_ms"]
    assert streamed == pytest.approx(
        (engine.api_output_token_us + engine.api_chunk_us + engine.api_step_us) / 1000
    )
    assert rows(ex, "first token")[0]["value"] == "13.75 us/streamed token + 67.2 us/chunk + 520 us/step"
    # a launch's --stream-interval: the first token's own chunk is the same, the row says how often the
    # running requests send one
    spaced = engine_profile("vllm", H200.hbm_gib, gpu_name=H200.gpu_name, stream_interval=20)
    row = rows(estimate("vllm", DENSE, Parallel(), 1, engine=spaced, workload=wl).explain, "first token")[0]
    assert row["mean_ms"] == pytest.approx(streamed)
    assert "67.2 us/chunk (one per 20 tokens of a running request)" in row["value"]


def test_the_queue_grows_with_the_clients():
    queue = []
    for clients in (4, 16, 64):
        ex = estimate("vllm", DENSE, Parallel(), clients, isl=4096, osl=32).explain
        queue.append(sum(r["mean_ms"] for r in rows(ex, "queue")))
    assert 0 < queue[0] < queue[1] < queue[2]


def test_a_calibrated_term_set_to_zero_leaves_the_split(tmp_path):
    shipped = fitted_params("trtllm")
    assert shipped["eager_moe_route_us"] > 0  # the shipped fit has the term ...
    case = ("trtllm", MOE, Parallel(tp=4, ep=4), 8)
    terms = [r["term"] for r in estimate(*case).explain["rows"]]
    assert any("eager_moe_route_us" in t for t in terms)
    assert any("moe_route_us)" in t for t in terms)
    path = tmp_path / "calibrated.json"
    path.write_text(json.dumps({"engines": {"trtllm": {"params": {**shipped, "eager_moe_route_us": 0.0}}}}))
    engine = engine_profile("trtllm", H200.hbm_gib, calibration=path, gpu_name=H200.gpu_name)
    ex = estimate(*case, engine=engine, fitted=fitted_params("trtllm", path)).explain
    terms = [r["term"] for r in ex["rows"]]
    assert not any("eager_moe_route_us" in t for t in terms)  # ... and, set to 0, it is gone
    route = next(r for r in ex["rows"] if "(moe_route_us)" in r["term"])
    assert route["source"] == "calibrated: no record of the rows they were fitted on: applied as given"
    assert route["value"].startswith(f"{shipped['moe_route_us']:g} us")


def test_a_term_the_calibration_does_not_fit_says_documented_default():
    ex = estimate("vllm", DENSE, Parallel(), 4).explain  # the shipped file keeps no vLLM fit
    step = next(r for r in ex["rows"] if "(step_overhead_us)" in r["term"])
    assert step["source"] == "documented default" and step["value"] == "900 us/step"


def test_each_logged_step_is_split_into_terms_that_add_up_to_its_price():
    engine = engine_profile("trtllm", H200.hbm_gib, gpu_name=H200.gpu_name)
    parallel = Parallel(tp=4, ep=4)
    model = engine.model_as_served(MOE)
    pricer = StepPricer(model, parallel, engine, perfdb_for(H200, "trtllm"))
    logs: list[StepLog] = []
    mem = prepare(model, H200, parallel, engine.max_num_batched_tokens, None, **engine.kv_rule)
    simulate(model, parallel, engine, mem, Workload(isl=3000, osl=32, concurrency=16), pricer,
             watch=watcher(logs))  # fmt: skip
    terms = TermPricer(pricer)
    steps = {id(b): b for log in logs for some in log.steps.values() for _, b in some}
    assert len(steps) > 10
    for batch in steps.values():
        assert sum(terms.split_of(batch).values()) == pytest.approx(batch.duration[0] * 1e6, rel=1e-9)


@pytest.mark.parametrize(
    "shape",
    [
        StepShape(prefill=((64, 0),)),  # short: the eager CPU exceeds the kernels
        StepShape(prefill=((8192, 0),), decode_batch=12, decode_kv_len=3000),
        StepShape(decode_batch=8, decode_kv_len=2048),  # a CUDA graph: no launches
        StepShape(decode_batch=900, decode_kv_len=2048),  # beyond the graphs
    ],
)
def test_step_terms_add_up_to_the_step_price(shape):
    engine = engine_profile("trtllm")
    db = perfdb_for(H200, "trtllm")
    parallel = Parallel(tp=4, ep=4)

    def part(s, which):
        return kernel_sum_by_category(step_ops(MOE, parallel, s, frozenset((which,))), db)

    terms = step_terms(part, MOE, parallel, shape, engine)
    price = priced_step(MOE, parallel, shape, engine, db)
    assert sum(terms.values()) == pytest.approx(price.us, rel=1e-9)
    kernel = sum(us for key, us in terms.items() if key[0] == "kernel")
    assert kernel == pytest.approx(price.kernel_us, rel=1e-9)
    assert {key[1] for key in terms if key[0] == "kernel"} >= {"moe", "communication", "attention"}


def test_explaining_changes_no_other_answer():
    engine = engine_profile("sglang", H200.hbm_gib, gpu_name=H200.gpu_name)
    args = (MOE, H200, Parallel(tp=2), engine, 16, 2048, 64)
    plain = estimate_aggregated(*args).model_dump(mode="json", exclude_none=True)
    explained = estimate_aggregated(*args, explain={}).model_dump(mode="json", exclude_none=True)
    explained.pop("explain")
    for d in (plain, explained):
        d["provenance"]["simulation"].pop("wall_ms")
    assert explained == plain


@pytest.mark.parametrize("parallel", [Parallel(), Parallel(tp=2, dp_attn=True)])
def test_the_twins_split_adds_up_to_its_mean_and_median_ttft(parallel):
    model = DENSE if parallel.attn_dp == 1 else MOE
    # 64 prompts of 2048 / 64 tokens (range ratio 0.5, no prefix), 16 clients, all sent at once
    stream = BenchStream(2048, 64, 0.5, 0, num_prompts=64, max_concurrency=16, request_rate=float("inf"))
    args = (model, H200, parallel, EngineSettings(engine="vllm"), stream, ["ttft"], [50.0], {})
    twin = simulate_benchmark(*args, explain=True)
    ttft = twin.summary.latency_ms["ttft"]
    assert twin.explain["requests"] == 64
    assert total(twin.explain, "mean") == pytest.approx(ttft.mean, rel=1e-9)
    assert total(twin.explain, "median") == pytest.approx(ttft.median, rel=1e-9)
    assert twin.extra_fields()["explain"] is twin.explain
    plain = simulate_benchmark(*args)
    assert plain.summary == twin.summary and "explain" not in plain.extra_fields()
