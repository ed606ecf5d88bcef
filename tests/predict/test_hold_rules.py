"""TensorRT-LLM's rules that hold new prompts back while decodes run (servelab.engines.trtllm.policy):
attention-DP balancing and the context batching wait, on a lane priced by hand (1 us per prompt token, 1 ms
per decode step) so every time below follows from the rules."""

from servelab.engines.trtllm.policy import TrtllmPolicy
from servelab.predict.engines import engine_profile
from servelab.predict.serving.aggregated import lane_limits
from servelab.predict.serving.engine import Lane, LaneLimits, Request
from servelab.predict.serving.simulator import Replay, run
from servelab.predict.serving.workload import Workload
from servelab.predict.static import prepare
from servelab.specs import Parallel, load_model, load_system

DECODE_US = 1000.0


def _decode(n, kv):
    return (DECODE_US,) * 3


def _mixed(chunks, n, kv):
    return (sum(new for new, _ in chunks) + (DECODE_US if n else 0.0),) * 3


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


def _second_ttft_ms(limits: LaneLimits, policy: TrtllmPolicy, second_prompt: int = 100) -> float:
    """Request 0 (100-token prompt, 1000 outputs) at t=0, request 1 at 10.5 ms: request 1's TTFT.

    Request 0 prefills alone (0.1 ms), then decodes in 1 ms steps; the stretch under way when request 1
    arrives ends at 11.1 ms (11 decode steps: 12 iterations in all). Admitted then, request 1 prefills in a
    step with the decode (prompt us + 1 ms)."""
    lane = Lane(limits, policy, _decode, _mixed)
    source = Replay([(100, 1000, 0), (second_prompt, 5, 0)], [0.0, 0.0105])
    run(lane, source)
    second = source.requests[1]
    assert second.first is not None
    return (second.first[0] - second.arrival[0]) * 1e3


def test_without_a_hold_rule_a_new_prompt_joins_the_next_step():
    assert abs(_second_ttft_ms(_limits(), TrtllmPolicy()) - (11.1 + 0.1 + 1.0 - 10.5)) < 1e-6  # 1.7 ms


def test_balancing_holds_a_prompt_until_the_timeout_of_its_counter():
    # 8 ranks, timeout 5: the counter runs every iteration since the last release (request 0's, at t=0) and
    # restarts at the timeout: after 12 iterations it stands at 12 % 5 = 2. The other 7 ranks are expected to
    # have a request after H(7) = 2.59 mean gaps of 12 / 2 = 6 iterations (15.6 > 5): the timeout decides,
    # 3 more decode steps (11.1 -> 14.1 ms), then the prefill step (1.1 ms)
    policy = TrtllmPolicy(attention_dp_balance=True, attention_dp_timeout_iters=5)
    assert abs(_second_ttft_ms(_limits(dp_ranks=8), policy) - (14.1 + 1.1 - 10.5)) < 1e-6  # 4.7 ms, was 1.7


def test_balancing_releases_at_once_when_every_rank_is_expected_to_have_a_prompt():
    # 2 ranks: the other one is expected to have a request after one mean gap (6 iterations), and 12 have
    # passed since the last release: no hold, however long the timeout
    policy = TrtllmPolicy(
        attention_dp_balance=True, attention_dp_timeout_iters=1000, attention_dp_batching_wait_iters=0
    )
    assert abs(_second_ttft_ms(_limits(dp_ranks=2), policy) - 1.7) < 1e-6


def _held(policy: TrtllmPolicy, *, ranks: int, steps: int, arrived: int, held: int, decoding: int = 1) -> int:
    """The iterations `policy` still holds a waiting prompt on a lane in this state."""
    lane = Lane(_limits(dp_ranks=ranks), policy, _decode, _mixed)
    lane.stats.steps, lane.arrived, lane.held, lane.num_decoding = steps, arrived, held, decoding
    lane.waiting.append(Request(0, 100, 10, 0))
    return policy.hold_steps(lane, decoding)


def test_balancing_waits_for_the_other_ranks_then_its_batching_wait():
    # 3 ranks: the other two have a request after H(2) = 1.5 mean gaps; a mean gap is 40 steps / 4 arrivals
    # = 10 iterations, so every rank is ready 15 iterations after the last release
    ready = TrtllmPolicy(
        attention_dp_balance=True, attention_dp_timeout_iters=100, attention_dp_batching_wait_iters=0
    )
    assert _held(ready, ranks=3, steps=40, arrived=4, held=5) == 10
    assert _held(ready, ranks=3, steps=40, arrived=4, held=15) == 0
    # ready and decoding everywhere: batching_wait_iters more
    waits = ready.model_copy(update={"attention_dp_batching_wait_iters": 4})
    assert _held(waits, ranks=3, steps=40, arrived=4, held=15) == 4
    # the timeout comes first
    short = ready.model_copy(update={"attention_dp_timeout_iters": 12})
    assert _held(short, ranks=3, steps=40, arrived=4, held=5) == 7
    # a rank without decodes releases at once
    assert _held(ready, ranks=3, steps=40, arrived=4, held=5, decoding=0) == 0


def test_batch_wait_holds_a_small_prompt_until_its_timeout():
    # 500 tokens wanted (0.5 of a 1000-token budget); 1 decode + 100 prompt tokens is less: held for 3
    # iterations (11.1 -> 14.1 ms), then the prefill step
    policy = TrtllmPolicy(batch_wait_timeout_iters=3, batch_wait_max_tokens_ratio=0.5)
    assert abs(_second_ttft_ms(_limits(), policy) - (14.1 + 1.1 - 10.5)) < 1e-6


def test_batch_wait_releases_a_prompt_that_fills_the_share_of_the_budget():
    # 1 decode + 600 prompt tokens >= 500: admitted at 11.1 ms, first token after 0.6 + 1 ms
    policy = TrtllmPolicy(batch_wait_timeout_iters=3, batch_wait_max_tokens_ratio=0.5)
    assert abs(_second_ttft_ms(_limits(), policy, second_prompt=600) - (11.1 + 0.6 + 1.0 - 10.5)) < 1e-6


def test_engine_profiles_turn_the_rules_into_lane_limits():
    model, system = load_model("deepseek-ai/DeepSeek-R1"), load_system("h200_sxm")
    dp8, tp8 = Parallel(tp=8, ep=8, dp_attn=True), Parallel(tp=8, ep=8)
    wl = Workload(isl=1024, osl=1024, concurrency=64)

    def holds(parallel, ranks=None, **kw) -> tuple[TrtllmPolicy, bool]:
        engine = engine_profile("trtllm", **kw)
        mem = prepare(model, system, parallel, engine.max_num_batched_tokens, fraction_of_free=True)
        assert isinstance(engine.policy, TrtllmPolicy)
        return engine.policy, engine.policy.holds(lane_limits(model, parallel, engine, mem, wl, ranks))

    assert not holds(dp8)[1]  # off by default, as in TensorRT-LLM
    on, held = holds(
        dp8, attention_dp_balance=True, attention_dp_timeout_iters=60, attention_dp_batching_wait_iters=0
    )
    assert held and (on.attention_dp_timeout_iters, on.attention_dp_batching_wait_iters) == (60, 0)
    assert not holds(tp8, attention_dp_balance=True)[1]  # no attention DP: nothing to balance
    assert not holds(dp8, ranks=4, attention_dp_balance=True)[1]  # idle ranks release at once
    wait, held = holds(tp8, batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9)
    assert held and (wait.batch_wait_timeout_iters, wait.batch_wait_max_tokens_ratio) == (20, 0.9)
