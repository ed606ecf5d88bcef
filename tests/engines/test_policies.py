"""Each engine's scheduling policy on small hand-made traces: the decisions it makes (what a step carries, who
is admitted, who is preempted and where it queues again, what is held), on a lane with one KV byte per token
and steps priced by hand (1 us per prompt token, 1 ms per decode step)."""

import pytest

from servelab.engines import MODELLED, Engine
from servelab.engines.defaults import KvCacheRule, engine_defaults
from servelab.engines.policy import SchedulingPolicy
from servelab.engines.policy_registry import POLICIES, policy_for
from servelab.engines.sglang.policy import SglangPolicy
from servelab.engines.trtllm.policy import TrtllmPolicy
from servelab.engines.vllm.batch import reserve_full_prompt_default
from servelab.engines.vllm.policy import VllmPolicy
from servelab.errors import ServelabError
from servelab.predict.engines import documented_profiles
from servelab.predict.serving.engine import Batch, Lane, LaneLimits, Request

INF = float("inf")


def _decode(n, kv):
    return (1000.0,) * 3


def _mixed(chunks, n, kv):
    return (sum(new for new, _ in chunks) + (1000.0 if n else 0.0),) * 3


def _lane(policy: SchedulingPolicy, *, budget: int = 100, kv: float = 1e12, dp_ranks: int = 1) -> Lane:
    limits = LaneLimits(
        max_num_batched_tokens=budget,
        max_num_seqs=256,
        chunked_prefill=True,
        kv_capacity=kv,
        kv_fixed=0.0,
        kv_per_token=1.0,
        dp_ranks=dp_ranks,
    )
    return Lane(limits, policy, _decode, _mixed)


def _request(idx: int, prompt: int, osl: int) -> Request:
    return Request(idx, prompt, osl, 0, arrival=(0.0, 0.0, 0.0))


def _step(lane: Lane, decode_steps: int | None = None) -> Batch:
    """Schedule and run the next step (a stretch of decode steps runs to its end, or `decode_steps` of it)."""
    horizon = INF if decode_steps is None else lane.clock[0] + (decode_steps - 0.5) * 1e-3
    batch = lane.schedule(horizon, 0)
    assert batch is not None
    lane.complete(batch)
    return batch


def _chunks(batch: Batch) -> list[tuple[int, int, int]]:
    """(request index, new tokens, tokens already cached) of each prompt chunk of a step."""
    return [(req.idx, take, past) for req, take, past in batch.chunks]


def _decoding(policy: SchedulingPolicy, kv: float = 1e12) -> Lane:
    """A lane where request 0 (prompt 10, 50 outputs) has been prefilled and decodes."""
    lane = _lane(policy, kv=kv)
    lane.add(_request(0, 10, 50))
    assert _chunks(_step(lane)) == [(0, 10, 0)]
    assert lane.num_decoding == 1
    return lane


# ---- vLLM --------------------------------------------------------------------------------------------------
def test_vllm_runs_the_decodes_first_then_continuing_prompts_then_admissions_in_arrival_order():
    lane = _decoding(VllmPolicy())
    for i, prompt in ((1, 150), (2, 30), (3, 30)):
        lane.add(_request(i, prompt, 5))
    # the decode takes 1 token of the budget of 100; request 1's prompt takes the other 99
    first = _step(lane)
    assert first.decodes == 1 and _chunks(first) == [(1, 99, 0)]
    # then request 1 continues (51), request 2 is admitted whole (30) and request 3 gets the rest (18)
    second = _step(lane)
    assert second.decodes == 1 and _chunks(second) == [(1, 51, 99), (2, 30, 0), (3, 18, 0)]
    assert [r.idx for r in lane.running] == [0, 1, 2, 3]


def test_vllm_preempts_the_last_admitted_and_queues_it_first_to_recompute():
    """Requests 0 and 1 (prompt 10) decode; the cache then holds 23 tokens, too few for both next tokens
    (2 x 11 + 2 = 24): request 1, the last admitted, is preempted; it waits ahead of request 2, and its
    prompt is now its prompt and the output it had (recomputed)."""
    lane = _lane(VllmPolicy())
    lane.add(_request(0, 10, 50))
    lane.add(_request(1, 10, 50))
    _step(lane)  # both prefilled: 10 tokens each, one output token each
    _step(lane, decode_steps=1)  # 11 tokens each
    lane.add(_request(2, 10, 50))
    lane.lim.kv_capacity = 23.0
    batch = lane.schedule(INF, 0)
    assert lane.stats.preemptions == 1
    assert [r.idx for r in lane.running] == [0] and [r.idx for r in lane.waiting] == [1, 2]
    assert lane.waiting[0].prompt == 12  # 10 prompt tokens + 2 emitted, all to recompute
    assert batch is not None and batch.decodes == 1 and not batch.chunks  # nothing else fits
    assert VllmPolicy().reserve_ratio(lane) == 0.0  # and nothing was reserved for output


@pytest.mark.parametrize("whole, admitted", [(True, False), (False, True)])
def test_vllm_admits_a_request_only_if_its_whole_prompt_fits(whole, admitted):
    """From vLLM 0.19.0 (scheduler_reserve_full_isl) a waiting request is admitted only where the free cache
    holds all of its prompt: request 0 decodes (10 tokens and its next one), leaving 39 of a 50-token cache;
    request 1's 60-token prompt has a first chunk of 29 under a 30-token budget, which fits: 0.18 admits it,
    0.19 does not."""
    lane = _lane(VllmPolicy(reserve_full_prompt=whole), budget=30, kv=50.0)
    lane.add(_request(0, 10, 50))
    assert _chunks(_step(lane)) == [(0, 10, 0)]
    lane.add(_request(1, 60, 5))
    batch = _step(lane, decode_steps=1)
    assert batch.decodes == 1
    assert _chunks(batch) == ([(1, 29, 0)] if admitted else [])
    assert [r.idx for r in lane.waiting] == ([] if admitted else [1])


def test_vllm_whole_prompt_admission_follows_the_release():
    assert reserve_full_prompt_default("0.19.0")[0] and reserve_full_prompt_default("v0.25.0")[0]
    assert not reserve_full_prompt_default("0.18.1")[0] and not reserve_full_prompt_default("0.12.0")[0]
    assert reserve_full_prompt_default(None)[0]  # not known: the newest releases'
    profile = documented_profiles()["vllm"]
    old = profile.model_copy(update={"reserve_full_prompt": False})
    assert old.policy.admits_whole_prompt() is False and profile.policy.admits_whole_prompt() is True


# ---- SGLang ------------------------------------------------------------------------------------------------
def test_sglang_runs_a_prefill_only_step_with_the_whole_budget_while_a_prompt_waits():
    lane = _decoding(SglangPolicy())
    lane.add(_request(1, 150, 5))
    # the decode of request 0 waits: request 1's prompt gets the whole budget, 100 then 50
    assert [(b.decodes, _chunks(b)) for b in (_step(lane), _step(lane))] == [
        (0, [(1, 100, 0)]),
        (0, [(1, 50, 100)]),
    ]
    # no prompt left: both decode
    after = _step(lane)
    assert after.decodes == 2 and not after.chunks


def test_sglang_with_mixed_chunk_runs_prompt_chunks_beside_the_decodes():
    lane = _decoding(SglangPolicy(mixed_chunk=True))
    lane.add(_request(1, 150, 5))
    batch = _step(lane)
    assert batch.decodes == 1 and _chunks(batch) == [(1, 99, 0)]


def test_sglang_retracts_to_the_back_of_the_queue_and_restarts_its_new_token_ratio():
    """Requests 0 and 1 (prompt 10, 100 outputs) decode 2 tokens each; request 2 waits. The cache shrinks to
    23 tokens: request 1 is retracted and queues behind request 2; the ratio restarts at (2 emitted + 20) /
    (100 + 1) over the one request still decoding."""
    policy = SglangPolicy()
    lane = _lane(policy)
    lane.add(_request(0, 10, 100))
    lane.add(_request(1, 10, 100))
    _step(lane)
    _step(lane, decode_steps=1)
    lane.add(_request(2, 10, 100))
    lane.lim.kv_capacity = 23.0
    lane.schedule(INF, 0)
    assert [r.idx for r in lane.running] == [0] and [r.idx for r in lane.waiting] == [2, 1]
    assert policy.reserve_ratio(lane) == pytest.approx(22 / 101)


def test_sglang_charges_a_new_request_all_of_its_output_and_then_closes_admission():
    """KV for 1,000 tokens, a new-token ratio of 0.5 that does not decay. Request 0 (prompt 10, 50 outputs)
    decodes; request 1 (prompt 100, 900 outputs) needs its prompt, all of its output and 0.5 of request 0's
    remaining 49: 100 + 900 + 24.5 > 1,000 - 11 - 1 free. It is refused, and admission stays closed (a later
    small request is not admitted) until a running request finishes."""
    policy = SglangPolicy(init_new_token_ratio=0.5, min_new_token_ratio=0.5)
    lane = _decoding(policy, kv=1000.0)
    lane.add(_request(1, 100, 900))
    refused = _step(lane, decode_steps=1)
    assert not refused.chunks and lane.admission_closed and lane.stats.blocked_kv == 1
    lane.add(_request(2, 5, 5))
    assert lane.prompt_chunks(100) == []  # closed, though request 2 would fit
    first = lane.running[0]
    while first.finish is None:
        assert not _step(lane).chunks
    assert not lane.admission_closed
    assert _chunks(_step(lane)) == [(1, 100, 0)]  # request 1 fits now, in a step of its own


# ---- TensorRT-LLM ------------------------------------------------------------------------------------------
def test_trtllm_admits_a_request_only_if_all_output_fits():
    """KV for 999 tokens; two requests of prompt 100 and 400 outputs arrive together. GUARANTEED_NO_EVICT
    needs 100 + 400 for the first and 100 + 400 + 400 (the first's output) beside its prompt for the second:
    1,000 > 999, so the second waits; vLLM admits both (it needs only their prompts)."""
    admitted = {}
    for name, policy in (("trtllm", TrtllmPolicy()), ("vllm", VllmPolicy())):
        lane = _lane(policy, budget=1000, kv=999.0)
        lane.add(_request(0, 100, 400))
        lane.add(_request(1, 100, 400))
        _step(lane)
        admitted[name] = [r.idx for r in lane.running]
    assert admitted == {"trtllm": [0], "vllm": [0, 1]}


def test_trtllm_holds_new_prompts_for_the_other_attention_dp_ranks():
    """8 ranks with attention-DP balancing (timeout 5 iterations): after one arrival in 40 iterations the
    other ranks are far from ready, so a waiting prompt is held until the counter, one iteration past request
    0's release, reaches the timeout; the decodes run alone meanwhile. Without balancing it is admitted at
    once."""
    for balance in (True, False):
        policy = TrtllmPolicy(attention_dp_balance=balance, attention_dp_timeout_iters=5)
        lane = _lane(policy, dp_ranks=8)
        lane.add(_request(0, 10, 50))
        _step(lane)
        lane.stats.steps = 40
        lane.add(_request(1, 10, 5))
        chunks, decodes, hold = policy.form_step(lane)
        if balance:
            assert chunks == [] and decodes and hold == 4 and lane.holding
            held = _step(lane)
            assert held.steps == 4 and not held.chunks  # decodes alone, for the hold
            assert _chunks(_step(lane)) == [(1, 10, 0)]  # then released
        else:
            assert [(r.idx, take) for r, take, _ in chunks] == [(1, 10)] and hold == 0


def test_trtllm_does_not_balance_a_lane_whose_ranks_are_not_all_busy():
    policy = TrtllmPolicy(attention_dp_balance=True)
    assert policy.holds(_lane(policy, dp_ranks=8).lim)
    assert not policy.holds(_lane(policy, dp_ranks=1).lim)  # one rank, or some rank idle


# ---- the registry and the engine packages ------------------------------------------------------------------
def test_every_engine_has_a_policy_and_documented_defaults():
    expected = {Engine.VLLM: VllmPolicy, Engine.SGLANG: SglangPolicy, Engine.TRTLLM: TrtllmPolicy}
    for engine in MODELLED:
        assert type(policy_for(engine)) is expected[engine] and policy_for(engine).kind == engine.value
        assert engine_defaults(engine).provenance
        profile = documented_profiles()[engine.value]
        assert profile.max_num_batched_tokens == engine_defaults(engine).max_num_batched_tokens
        assert type(profile.policy) is expected[engine]
    assert type(policy_for("torch")) is SchedulingPolicy and policy_for("torch").kind == "torch"
    assert type(policy_for("trt")) is TrtllmPolicy  # any spelling of an engine's name
    assert set(POLICIES) == {*(e.value for e in MODELLED), "torch"}


def test_each_engine_sizes_its_kv_cache_by_its_own_rule():
    rules = {e: engine_defaults(e).kv_cache_rule for e in MODELLED}
    assert rules == {
        Engine.VLLM: KvCacheRule.gpu_share,
        Engine.TRTLLM: KvCacheRule.free_share,
        Engine.SGLANG: KvCacheRule.static_fraction,
    }
    assert engine_defaults(Engine.SGLANG).budget_by_gpu_gib[-1] == (None, 16384)


def test_an_unknown_engine_is_one_line_naming_the_known_ones():
    with pytest.raises(ServelabError) as err:
        policy_for("vlm")
    message = str(err.value)
    assert "\n" not in message and "'vlm'" in message
    assert "did you mean vllm" in message and "vllm, sglang, trtllm, torch" in message


def test_a_setting_the_engines_policy_lacks_is_one_line_naming_it():
    with pytest.raises(ServelabError) as err:
        VllmPolicy().with_settings({"attention_dp_balance": True}, "vllm")
    assert err.value.field == "attention_dp_balance" and "\n" not in str(err.value)
    with pytest.raises(ServelabError, match="attention_dp_timeout_iters"):
        TrtllmPolicy().with_settings({"attention_dp_timeout_iters": -1}, "trtllm")
    assert TrtllmPolicy().with_settings({"attention_dp_balance": True}, "trtllm").attention_dp_balance
