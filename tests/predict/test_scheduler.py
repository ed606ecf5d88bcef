"""Engine scheduling policies and the API server in front of them, on a lane priced by hand-computable step
functions (1 us per prompt token, 1 ms per decode step), so every time below follows from the rules alone."""

import random
from dataclasses import replace

import pytest

from servelab.engines.policy import SchedulingPolicy
from servelab.engines.sglang.policy import SglangPolicy
from servelab.engines.trtllm.policy import TrtllmPolicy
from servelab.engines.vllm.policy import VllmPolicy
from servelab.predict.engines import engine_profile
from servelab.predict.serving.engine import Lane, LaneLimits, Request
from servelab.predict.serving.simulator import Replay, run

STEP_DECODE_US = 1000.0


def _decode(n, kv):
    return (STEP_DECODE_US,) * 3


def _mixed(chunks, n, kv):
    us = sum(new for new, _ in chunks) + (STEP_DECODE_US if n else 0.0)
    return (us,) * 3


def _limits(**kw) -> LaneLimits:
    base = dict(
        max_num_batched_tokens=1000,
        max_num_seqs=256,
        chunked_prefill=True,
        kv_capacity=1e12,
        kv_fixed=0.0,
        kv_per_token=1.0,
    )
    return LaneLimits(**{**base, **kw})


def _replay(
    limits, requests, offsets=None, limit=None, policy: SchedulingPolicy | None = None
) -> tuple[Replay, list]:
    """Run the requests (prompt, output, cached) through one lane under `policy` (vLLM's unless given);
    returns the source and every step."""
    steps: list = []
    lane = Lane(limits, policy or VllmPolicy(), _decode, _mixed)
    schedule = lane.schedule

    def recording(horizon, drive, one_step=False):
        batch = schedule(horizon, drive, one_step)
        if batch is not None:
            steps.append((batch.decodes, [take for _, take, _ in batch.chunks]))
        return batch

    lane.schedule = recording  # type: ignore[method-assign]  # observe the batches the policy forms
    source = Replay(requests, offsets or [0.0] * len(requests), limit)
    run(lane, source)
    return source, steps


def _ttft_s(source) -> list[float]:
    return [r.first[0] - r.arrival[0] for r in source.requests]


def test_vllm_runs_decodes_first_and_fills_the_rest_of_the_budget_with_prompt_chunks():
    # request 0 decodes while request 1's 2,500-token prompt arrives: every step carries the decode and
    # 1000 - 1 prompt tokens
    source, steps = _replay(_limits(), [(100, 50, 0), (2500, 5, 0)], offsets=[0.0, 0.01])
    mixed = [s for s in steps if s[1] and s[0]]
    assert mixed and all(decodes == 1 and sum(chunks) <= 1000 - decodes for decodes, chunks in mixed)
    assert [sum(c) for _, c in mixed][:2] == [999, 999]
    assert all(r.finish is not None for r in source.requests)


def test_vllm_async_scheduling_puts_a_request_arriving_mid_step_in_the_step_after_the_next():
    # request 0's prompt takes 0.01 ms, then it decodes in 1 ms steps (from 0.01, 1.01, ...); request 1 (a
    # 100-token prompt) arrives at 0.5 ms, in the first of them. Formed when the last step ends, its prompt
    # rides the step from 1.01 ms (1.1 ms long): first token at 2.11 ms. Formed ahead (vLLM's async
    # scheduling), the step from 1.01 ms was formed at 0.01 ms without it, so it rides the one from 2.01 ms:
    # first token at 3.11 ms, a whole step later.
    requests, offsets = [(10, 20, 0), (100, 5, 0)], [0.0, 0.0005]
    sync, _ = _replay(_limits(), requests, offsets, policy=VllmPolicy(async_scheduling=False))
    ahead, steps = _replay(_limits(), requests, offsets, policy=VllmPolicy())
    assert sync.requests[1].first[0] == pytest.approx(0.00211)
    assert ahead.requests[1].first[0] == pytest.approx(0.00311)
    # the step that ran while it waited was a single decode step, not a stretch that would keep it waiting
    assert steps[:4] == [(0, [10]), (1, []), (1, []), (1, [100])]


def test_vllm_async_scheduling_takes_a_request_at_once_when_nothing_was_formed_ahead():
    # an idle engine: nothing is under way, so the request is scheduled when it arrives, as without it
    requests, offsets = [(100, 5, 0), (100, 5, 0)], [0.0, 0.05]
    sync, _ = _replay(_limits(), requests, offsets, policy=VllmPolicy(async_scheduling=False))
    ahead, _ = _replay(_limits(), requests, offsets, policy=VllmPolicy())
    assert _ttft_s(ahead) == pytest.approx(_ttft_s(sync))


def test_vllm_async_scheduling_follows_the_release():
    old = engine_profile("vllm", 80.0, gpu_name="H100", engine_version="0.13.0")
    new = engine_profile("vllm", 80.0, gpu_name="H100", engine_version="v0.14.0")
    unknown = engine_profile("vllm", 80.0, gpu_name="H100")
    given = engine_profile("vllm", 80.0, gpu_name="H100", engine_version="0.25.0", async_scheduling=False)
    assert [p.policy.schedules_ahead() for p in (old, new, unknown, given)] == [False, True, True, False]
    assert "async scheduling off (vLLM 0.13.0 predates its default, 0.14.0)" in old.source
    assert "async scheduling on" in new.source and "async scheduling" not in given.source


@pytest.mark.parametrize(
    "ahead,sync,setting,first_s,formed",
    [
        # SGLang runs the prompt in a batch of its own (0.1 ms): from 1.01 ms without overlap, from 2.01 ms
        # with it (the decode batch from 1.01 ms was formed at 0.01 ms, before the request came)
        (
            SglangPolicy(),
            SglangPolicy(overlap_schedule=False),
            "overlap_schedule",
            (0.00111, 0.00211),
            [(0, [10]), (1, []), (1, []), (0, [100])],
        ),
        # TensorRT-LLM's prompt rides with the decode (1.1 ms), as vLLM's does
        (
            TrtllmPolicy(overlap_scheduler=True),
            TrtllmPolicy(),
            "overlap_scheduler",
            (0.00211, 0.00311),
            [(0, [10]), (1, []), (1, []), (1, [100])],
        ),
    ],
)
def test_overlap_schedulers_put_a_request_arriving_mid_step_in_the_step_after_the_next(
    ahead, sync, setting, first_s, formed
):
    # as test_vllm_async_scheduling_puts_...: request 1 arrives at 0.5 ms, during the first 1 ms decode step
    requests, offsets = [(10, 20, 0), (100, 5, 0)], [0.0, 0.0005]
    formed_late, _ = _replay(_limits(), requests, offsets, policy=sync)
    formed_ahead, steps = _replay(_limits(), requests, offsets, policy=ahead)
    assert (formed_late.requests[1].first[0], formed_ahead.requests[1].first[0]) == pytest.approx(first_s)
    assert steps[:4] == formed
    # an idle engine takes a request at once, overlap or not
    requests, offsets = [(100, 5, 0), (100, 5, 0)], [0.0, 0.05]
    idle_late, _ = _replay(_limits(), requests, offsets, policy=sync)
    idle_ahead, _ = _replay(_limits(), requests, offsets, policy=ahead)
    assert _ttft_s(idle_ahead) == pytest.approx(_ttft_s(idle_late))
    assert ahead.schedules_ahead() and not sync.schedules_ahead()
    for on in (True, False):
        assert engine_profile(ahead.kind, **{setting: on}).policy.schedules_ahead() is on


def test_overlap_scheduler_defaults():
    # SGLang's as the engine runs it; TensorRT-LLM's off: neither its shipped fit nor a refit with the rule on
    # did better (docs/accuracy.md, "TensorRT-LLM's overlap scheduler, refitted")
    assert engine_profile("sglang").policy.schedules_ahead()
    assert not engine_profile("trtllm").policy.schedules_ahead()


def test_token_budget_is_never_exceeded():
    _, steps = _replay(_limits(max_num_batched_tokens=700), [(900, 30, 0)] * 12)
    assert max(decodes + sum(chunks) for decodes, chunks in steps) <= 700


def test_sglang_runs_prompts_in_steps_of_their_own_before_decodes():
    # batches formed when the last ends (the overlap scheduler's extra step: the test above)
    sync = SglangPolicy(overlap_schedule=False)
    source, steps = _replay(_limits(), [(100, 50, 0), (2500, 5, 0)], offsets=[0.0, 0.01], policy=sync)
    prompt_steps = [s for s in steps if s[1]]
    assert prompt_steps and all(decodes == 0 for decodes, _ in prompt_steps)
    # the prompt gets the whole budget: 2500 tokens in three steps of 1000, 1000, 500
    assert [sum(c) for _, c in prompt_steps[1:]] == [1000, 1000, 500]
    # its first token comes after the decode step under way and its own 2.5 ms of prompt steps: sooner than
    # under decode-first scheduling, where every chunk step also carries the decode
    assert _ttft_s(source)[1] <= (2500 + STEP_DECODE_US) * 1e-6 + 1e-9
    mixed_source, _ = _replay(_limits(), [(100, 50, 0), (2500, 5, 0)], offsets=[0.0, 0.01])
    assert _ttft_s(source)[1] < _ttft_s(mixed_source)[1]


def test_first_wave_ttft_grows_linearly_with_the_clients_that_share_the_budget():
    """Every client sends at t=0 with a prompt the size of the budget: the engine prefills them one a step, so
    the k-th waits k prefill steps and the mean TTFT is (C + 1) / 2 steps, whatever the decodes add."""
    step_s = 1000 * 1e-6
    means = {}
    for c in (1, 4, 16):
        source, _ = _replay(_limits(), [(1000, 2, 0)] * c)
        ttft = sorted(_ttft_s(source))
        means[c] = sum(ttft) / c
        assert ttft[0] == pytest.approx(step_s, rel=0.01)
        assert all(b > a for a, b in zip(ttft, ttft[1:], strict=False))
    for c, mean in means.items():
        # each later step also carries the decodes of those already done: at most one decode cost more a step
        assert (c + 1) / 2 * step_s <= mean <= (c + 1) / 2 * (step_s + STEP_DECODE_US * 1e-6) + 1e-9


def test_api_server_takes_requests_in_one_at_a_time_and_streaming_slows_it():
    per_request, per_token = 0.002, 1e-6
    limits = _limits(frontend_s=per_request, frontend_token_s=per_token)
    # an API server whose output streaming does not queue behind intake (SchedulingPolicy's default)
    source, _ = _replay(limits, [(10, 2, 0)] * 4, policy=SchedulingPolicy())
    handed = [per_request + per_token * 10] * 4
    ttft = _ttft_s(source)
    # the k-th request reaches the scheduler after k intakes; the engine itself adds a few microseconds
    for k, t in enumerate(ttft, start=1):
        assert t == pytest.approx(k * handed[0] + 10e-6, abs=20e-6)
    # while the lane streams r tokens/s, intake gets the CPU share streaming leaves
    assert limits.frontend_cost_s(10, 0.0) == pytest.approx(handed[0])
    busy = _limits(frontend_s=per_request, frontend_out_token_s=1e-4)
    assert busy.frontend_cost_s(0, 5000.0) == pytest.approx(per_request / (1 - 0.5))
    assert busy.frontend_cost_s(0, 1e9) == pytest.approx(per_request / 0.05)  # saturated: bounded
    # a serial output stream is queued work of its own instead (stream_out): intake is not stretched
    assert busy.frontend_cost_s(0, 5000.0, streamed=True) == pytest.approx(per_request)


def test_reserving_engines_admit_fewer_requests_into_the_same_cache():
    """KV for 3,000 tokens; six prompts of 500 with 500 outputs each. vLLM admits by prompt (it preempts when
    the cache fills); a no-evict engine (TensorRT-LLM) admits only while every admitted output still fits."""
    running = {}
    for name, policy in (("vllm", VllmPolicy()), ("trtllm", TrtllmPolicy())):
        limits = _limits(kv_capacity=3000.0, max_num_batched_tokens=10_000)
        lane = Lane(limits, policy, _decode, _mixed)
        for i in range(6):
            lane.add(Request(i, 500, 500, 0, arrival=(0.0, 0.0, 0.0)))
        lane.schedule(float("inf"), 0)
        running[name] = len(lane.running)
    assert running == {"vllm": 6, "trtllm": 3}  # 6 x 500 prompt tokens; 3 x (500 + 500) reserved


def test_sglang_charges_the_requests_it_admits_their_whole_output():
    """KV for 850 tokens, new-token ratio 0.7, two prompts of 100 with 400 outputs arriving together. SGLang's
    PrefillAdder.add_one_req charges a request it admits its prompt and all of its output: the first takes
    500, and the second needs 100 + 400 beside it (900 > 850), so it waits; charging admitted requests only
    0.7 x their output would have let both in (100 + 100 + 0.7 x 800 = 760). While the first decodes, the room
    left shrinks (850 - (101 + k) - 0.7 x (399 - k) = 469.7 - 0.3 k after k steps), so the second's prefill
    waits for the first to finish."""
    policy = SglangPolicy(init_new_token_ratio=0.7, min_new_token_ratio=0.7)
    source, steps = _replay(_limits(kv_capacity=850.0), [(100, 400, 0), (100, 400, 0)], policy=policy)
    assert steps[0] == (0, [100])
    first, second = source.requests
    assert second.first[0] - first.finish[0] == pytest.approx(100e-6)


def test_sglang_new_token_ratio_falls_from_its_start_to_its_floor():
    sglang = engine_profile("sglang").policy
    assert isinstance(sglang, SglangPolicy)
    assert sglang.new_token_ratio(0) == pytest.approx(0.7)
    assert 0.098 < sglang.new_token_ratio(300) < 0.7
    assert sglang.new_token_ratio(10_000) == pytest.approx(0.098)


def _admitted_after_a_decodes(clip: int) -> bool:
    """KV for 1,200 tokens, new-token ratio 0.5. A (prompt 100, output 1,000) is admitted and prefilled; then
    B (prompt 100, output 1,000) arrives: is B admitted in the next step?"""
    limits = _limits(kv_capacity=1200.0, max_num_batched_tokens=10_000)
    policy = SglangPolicy(init_new_token_ratio=0.5, min_new_token_ratio=0.5, clip_max_new_tokens=clip)
    lane = Lane(limits, policy, _decode, _mixed)
    lane.add(Request(0, 100, 1000, 0, arrival=(0.0, 0.0, 0.0)))
    prefill = lane.schedule(float("inf"), 0)
    assert prefill is not None and [take for _, take, _ in prefill.chunks] == [100]
    lane.complete(prefill)
    lane.add(Request(1, 100, 1000, 0, arrival=(0.0, 0.0, 0.0)))
    step = lane.schedule(float("inf"), 0)
    return step is not None and [take for _, take, _ in step.chunks] == [100]


def test_sglang_reserves_at_most_the_clip_of_any_requests_output():
    """SGLang's PrefillAdder counts min(remaining output, CLIP_MAX_NEW_TOKENS = 4096) of a request, here with
    a clip of 100. A is charged 100 + min(1000, 100) = 200 to get in (1,100 without the clip, which also
    fits). After A's prefill the cache holds its 100 tokens and the next decode token: 1,099 free. B needs its
    prompt, its output and 0.5 x A's remaining 999: 100 + 1000 + 499.5 = 1,599.5 > 1,099 without the clip (B
    waits), 100 + 100 + 0.5 x 100 = 250 with it (B is admitted)."""
    assert _admitted_after_a_decodes(clip=100)
    assert not _admitted_after_a_decodes(clip=0)


def test_the_clipped_reserve_is_the_sum_over_requests_at_every_step():
    """The lane keeps the clipped reserve as running sums (a heap of the points where a request's remaining
    output falls to the clip); at every scheduling point of a KV-bound run with retractions it equals the sum
    of min(remaining output, clip) over the admitted requests, counted one by one."""
    policy = SglangPolicy(
        init_new_token_ratio=0.7,
        min_new_token_ratio=0.05,
        new_token_ratio_decay_steps=50,
        clip_max_new_tokens=60,
        retract_decode_steps=20,
        admission_latch=True,
    )
    lane = Lane(_limits(kv_capacity=6000.0), policy, _decode, _mixed)
    checked = []
    schedule = lane.schedule

    def checking(horizon, drive):
        by_hand = sum(
            min(r.target - lane.G if r.computed >= r.prompt else r.osl - r.out, 60) for r in lane.running
        )
        checked.append((lane.reserved_tokens(1.0), by_hand))
        return schedule(horizon, drive)

    lane.schedule = checking  # type: ignore[method-assign]  # compare before every step
    rng = random.Random(7)
    requests = [(rng.randint(50, 400), rng.randint(5, 300), 0) for _ in range(80)]
    run(lane, Replay(requests, [0.0] * len(requests), limit=24))
    assert lane.stats.preemptions > 0 and len(checked) > 100
    for kept, by_hand in checked:
        assert kept == pytest.approx(by_hand)


def test_a_retraction_restarts_sglangs_new_token_ratio():
    """SGLang's retract_decode sets new_token_ratio = (output tokens emitted + 20 per remaining request) /
    (their max_new_tokens + 1), at most 1; it then decays as before, 0.6 / 600 = 0.001 a decode step. A and B
    (prompt 100, output 100) are prefilled together and decode 9 steps (10 tokens each, 109 KV tokens each);
    the cache then shrinks to 219 tokens, too few for both next tokens (220): B, the last admitted, is
    retracted, and the ratio restarts at (10 + 20) / 101 = 0.297 instead of 0.7 - 0.009 = 0.691. C, which
    arrived meanwhile and does not fit either, keeps its place ahead of B (vLLM puts B first)."""
    ratios, queues = {}, {}
    sglang = SglangPolicy(min_new_token_ratio=0.1, new_token_ratio_decay_steps=600, retract_decode_steps=20)
    for name, policy in (("sglang", sglang), ("vllm", VllmPolicy())):
        limits = _limits(kv_capacity=1e6, max_num_batched_tokens=10_000)
        lane = Lane(limits, policy, _decode, _mixed)
        for i in range(2):
            lane.add(Request(i, 100, 100, 0, arrival=(0.0, 0.0, 0.0)))
        lane.complete(lane.schedule(float("inf"), 0))
        stretch = lane.schedule(lane.clock[0] + 8.5e-3, 0)  # 9 decode steps of 1 ms
        assert stretch is not None and stretch.steps == 9
        lane.complete(stretch)
        lane.add(Request(2, 100, 100, 0, arrival=(0.0, 0.0, 0.0)))
        before = policy.reserve_ratio(lane)
        lane.lim = replace(limits, kv_capacity=219.0)
        lane.schedule(float("inf"), 0)
        assert [r.idx for r in lane.running] == [0] and lane.stats.preemptions == 1
        ratios[name] = (before, policy.reserve_ratio(lane))
        queues[name] = [r.idx for r in lane.waiting]
    assert ratios["sglang"] == pytest.approx((0.7 - 0.6 * 9 / 600, 30 / 101))
    assert ratios["vllm"] == (0.0, 0.0)  # vLLM reserves nothing
    assert queues == {"sglang": [2, 1], "vllm": [1, 2]}


def test_sglang_stops_admitting_after_a_refusal_until_a_request_finishes():
    """KV for 850 tokens, a new-token ratio falling from 0.7 to 0 over 10 decode steps. A (prompt 100, output
    400) is admitted (100 + 400 = 500); B (the same) needs 100 + 400 + 400 = 900 > 750 and is refused. Two
    decode steps later it would fit (850 - 103 = 747 free, 500 + 0.56 x 397 = 722 needed), and C's arrival at
    5 ms makes the scheduler look again: without the latch B is admitted then; SGLang's batch_is_full keeps
    admission shut until A finishes (400 steps of 1 ms)."""
    firsts = {}
    for latch in (False, True):
        policy = SglangPolicy(min_new_token_ratio=0.0, new_token_ratio_decay_steps=10, admission_latch=latch)
        source, _ = _replay(
            _limits(kv_capacity=850.0),
            [(100, 400, 0), (100, 400, 0), (100, 10, 0)],
            offsets=[0.0, 0.0, 5e-3],
            policy=policy,
        )
        a, b, _ = source.requests
        firsts[latch] = (b.first[0], a.finish[0])
    b_first, a_finish = firsts[False]
    assert 5e-3 < b_first < 10e-3
    b_first, a_finish = firsts[True]
    assert b_first > a_finish


def test_engine_profiles_carry_their_engines_policies():
    assert type(engine_profile("vllm").policy) is VllmPolicy
    assert type(engine_profile("sglang").policy) is SglangPolicy
    assert type(engine_profile("trtllm").policy) is TrtllmPolicy
    assert type(engine_profile("torch").policy) is SchedulingPolicy
    assert engine_profile("sglang").kv_static_fraction and not engine_profile("trtllm").kv_static_fraction
    assert engine_profile("trtllm").kv_of_free and not engine_profile("vllm").kv_of_free
    # an engine setting given to the profile sets its policy's
    assert engine_profile("sglang", mixed_chunk=True).policy == SglangPolicy(mixed_chunk=True)


def test_sglang_token_budget_defaults_by_gpu_memory_unless_given():
    assert engine_profile("sglang", 139.8).max_num_batched_tokens == 8192  # H200
    assert engine_profile("sglang", 180.0).max_num_batched_tokens == 16384  # B200
    assert engine_profile("sglang", 40.0).max_num_batched_tokens == 4096
    assert engine_profile("sglang", 180.0, max_num_batched_tokens=2048).max_num_batched_tokens == 2048
    # vLLM's depends on the GPU from release 0.28.0 on (servelab.engines.vllm.batch), not before
    assert engine_profile("vllm", 180.0, engine_version="0.27.1").max_num_batched_tokens == 8192
    assert engine_profile("vllm", 180.0, engine_version="0.28.0").max_num_batched_tokens == 16384


def test_streaming_api_server_delays_what_the_client_sees_by_its_backlog():
    """SGLang's TokenizerManager takes requests in and streams every output token in one process, one at a
    time. Two prompts of 100 tokens, 3 output tokens each, 5 ms of API-server work per streamed token: the
    prefill step ends at 0.2 ms and its two first tokens are handled by 10.2 ms; the two decode steps end at
    2.2 ms, but their four tokens wait behind the first two and are handled by 30.2 ms. The client sees the
    server's pace: TPOT 10 ms (two tokens of 5 ms a step), not the engine's 1 ms."""
    limits = _limits(frontend_out_token_s=5e-3)
    streamed = SchedulingPolicy(serial_output_stream=True)
    source, _ = _replay(limits, [(100, 3, 0), (100, 3, 0)], policy=streamed)
    for req in source.requests:
        assert req.first[0] == pytest.approx(10.2e-3)
        assert req.finish[0] == pytest.approx(30.2e-3)
    plain, _ = _replay(
        _limits(frontend_out_token_s=5e-3), [(100, 3, 0), (100, 3, 0)], policy=SchedulingPolicy()
    )
    assert [r.finish[0] for r in plain.requests] == pytest.approx([2.2e-3, 2.2e-3])


def test_a_serial_output_stream_also_pays_for_each_step_it_takes_in():
    """The same two prompts with 1 ms of API-server work per engine step besides 5 ms a token (vLLM V1's
    output_handler takes each step's outputs in as one batch): the prefill step's two first tokens are
    handled by 0.2 + 2 x 5 + 1 = 11.2 ms; each decode step adds its two tokens and itself, 11 ms, so the
    last tokens are handled by 33.2 ms. vLLM's policy streams this way."""
    limits = _limits(frontend_out_token_s=5e-3, frontend_step_s=1e-3)
    source, _ = _replay(limits, [(100, 3, 0), (100, 3, 0)], policy=VllmPolicy())
    assert VllmPolicy().serial_output_stream
    for req in source.requests:
        assert req.first[0] == pytest.approx(11.2e-3)
        assert req.finish[0] == pytest.approx(33.2e-3)


def test_a_client_sends_its_next_request_when_it_sees_the_last_one_end():
    """One client (concurrency 1): its second request leaves when the streamed last token of the first has
    reached it, 10 ms after the engine's step (two tokens of 5 ms), not when the engine finished."""
    limits = _limits(frontend_out_token_s=5e-3)
    streamed = SchedulingPolicy(serial_output_stream=True)
    source, _ = _replay(limits, [(100, 2, 0), (100, 2, 0)], limit=1, policy=streamed)
    first, second = source.requests
    assert first.finish[0] == pytest.approx(100e-6 + 5e-3 + 5e-3)
    assert second.arrival[0] == pytest.approx(first.finish[0])


def test_a_lagging_stream_merges_the_running_requests_tokens_into_fewer_chunks():
    """vLLM's RequestOutputCollector merges a request's outputs that its handler has not sent yet, so the
    chunks of the running requests never hold the queue more than about a step behind: 30 prompts of 100
    tokens with 4 outputs each (three prompt steps of 1 ms, 1,000 tokens each, then 1 ms decode steps), 1 ms
    a chunk besides 10 us a token. The 30 first tokens are each sent (30 x 1.01 ms); the decode steps' 30
    chunks each (30 ms a step, against 1 ms steps) would put the last tokens about 90 ms after the first;
    merged, they come within a few steps of the backlog the first tokens left."""
    limits = _limits(frontend_out_token_s=1e-5, frontend_chunk_s=1e-3)
    source, _ = _replay(limits, [(100, 4, 0)] * 30, policy=VllmPolicy())
    first = max(r.first[0] for r in source.requests)
    finish = max(r.finish[0] for r in source.requests)
    assert 30 * 1.01e-3 < first < 3e-3 + 30 * 1.01e-3  # every first token's own chunk
    assert finish - first < 5e-3  # not 3 x 30 ms of chunks more
    unmerged = _limits(frontend_out_token_s=1e-5 + 1e-3)  # the same work as one cost a token: no merging
    slow, _ = _replay(unmerged, [(100, 4, 0)] * 30, policy=VllmPolicy())
    assert max(r.finish[0] for r in slow.requests) - first > 80e-3


def test_a_stream_merges_only_while_a_steps_outputs_fit_one_slice():
    """vLLM's output_handler takes a step's outputs 128 requests a slice and lets each slice's handlers send
    their chunks before the next (AsyncLLM, v1/engine/async_llm.py, 0.25.0): with more running requests than
    that, a lagging stream merges nothing. 150 prompts of 100 tokens in one step, 4 outputs each, 1 ms a
    chunk: their first tokens are sent by about 166 ms; then three decode steps of 150 chunks each hold the
    queue 450 ms more, where one slice of 150 (output_slice None or 256) merges them into a few ms."""
    limits = _limits(frontend_out_token_s=1e-5, frontend_chunk_s=1e-3, max_num_batched_tokens=100_000)
    tails = {}
    for output_slice in (128, None, 256):
        source, _ = _replay(limits, [(100, 4, 0)] * 150, policy=VllmPolicy(output_slice=output_slice))
        first = max(r.first[0] for r in source.requests)
        tails[output_slice] = max(r.finish[0] for r in source.requests) - first
    assert VllmPolicy().output_slice == 128
    assert tails[128] > 3 * 140e-3
    assert tails[None] == tails[256] < 10e-3


def test_a_stream_interval_sends_a_running_requests_tokens_in_fewer_chunks_but_its_first_at_once():
    """vLLM's --stream-interval N: a running request's output waits for N tokens (or its end) before it
    becomes a chunk, its first token goes at once (RequestState.make_request_output, v1/engine/
    output_processor.py, 0.25.0). Two prompts of 100 tokens, 3 outputs each, 0.4 ms a chunk and nothing
    else on the API server, a prompt step of 0.2 ms and two decode steps of 1 ms: the first tokens are sent
    by 0.2 + 2 x 0.4 = 1.0 ms either way; a token a chunk, the decode steps' four chunks take 1.6 ms from
    the first step's end (the last tokens reach the clients at 1.2 + 1.6 = 2.8 ms, after the engine's
    2.2); at an interval of 4 they take 0.4 ms, done before the last step ends (2.2 ms)."""
    finishes = {}
    for interval in (1, 4):
        limits = _limits(frontend_chunk_s=4e-4, stream_interval=interval)
        source, _ = _replay(limits, [(100, 3, 0), (100, 3, 0)], policy=VllmPolicy())
        assert [r.first[0] for r in source.requests] == pytest.approx([1.0e-3, 1.0e-3])
        finishes[interval] = [r.finish[0] for r in source.requests]
    assert finishes[1] == pytest.approx([2.8e-3, 2.8e-3])
    assert finishes[4] == pytest.approx([2.2e-3, 2.2e-3])
