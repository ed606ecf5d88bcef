"""A disaggregated decode worker's first step for a request: the request arrives with its prompt's KV and
the first token the prefill worker sampled, joins the running decode batch, and its first step there is a
decode step of that batch (never a one-token prompt step, which the engine profiles price as eager)."""

import pytest

from servelab.engines.policy import SchedulingPolicy
from servelab.engines.sglang.policy import SglangPolicy
from servelab.engines.trtllm.policy import TrtllmPolicy
from servelab.engines.vllm.policy import VllmPolicy
from servelab.metrics import distribution_ms
from servelab.predict.serving.aggregated import request_latencies_s
from servelab.predict.serving.engine import Lane, LaneLimits
from servelab.predict.serving.simulator import ClosedLoop, run
from servelab.predict.serving.workload import Workload

DECODE_US = 20_000.0  # a decode step of the batch
EAGER_US = 200_000.0  # a step carrying a prompt chunk (the engines' eager step)


def _lane(policy: SchedulingPolicy, decodes: list, mixed: list, joins: bool, kv: float = 1e12) -> Lane:
    def price_decode(n, kv):
        decodes.append(n)
        return (DECODE_US,) * 3

    def price_mixed(chunks, n, kv):
        mixed.append((chunks, n))
        return (EAGER_US,) * 3

    limits = LaneLimits(
        max_num_batched_tokens=8192,
        max_num_seqs=256,
        chunked_prefill=True,
        kv_capacity=kv,
        kv_fixed=0.0,
        kv_per_token=1.0,
    )
    return Lane(limits, policy, price_decode, price_mixed, joins=joins)


@pytest.mark.parametrize("policy", [VllmPolicy(), SglangPolicy(), TrtllmPolicy()], ids=lambda p: p.kind)
def test_an_arrived_request_joins_the_decode_batch_and_is_never_a_prompt_step(policy):
    wl = Workload(isl=1000, osl=20, concurrency=4, num_requests=24)
    decodes: list = []
    mixed: list = []
    lane = _lane(policy, decodes, mixed, joins=True)
    source = ClosedLoop(wl, prompt=wl.isl, cached=wl.isl, arrived=True)
    run(lane, source)
    assert not mixed  # no step carried a prompt chunk
    # every decode step is the whole batch: a request that arrives as another finishes joins the next step
    assert set(decodes) == {4}
    measured = source.measured_requests()
    assert len(measured) == 24
    lat = request_latencies_s(measured)[0]
    # the first token (the prefill worker's) is delivered when the request joins: here as it arrives, at a
    # step's end; the decode steps then give the other osl - 1 tokens, one step each
    assert max(lat["ttft"]) == 0.0
    assert distribution_ms(lat["tpot"], ()).mean == pytest.approx(DECODE_US / 1000.0)


def test_without_joining_the_same_request_is_a_one_token_prompt_step():
    """The lane without `joins` (an aggregated engine, or the planner before): a request whose prompt is
    cached but one token goes through a prompt step, priced as the mixed (eager) step."""
    wl = Workload(isl=1000, osl=20, concurrency=4, num_requests=24, range_ratio=0.0)
    decodes: list = []
    mixed: list = []
    lane = _lane(VllmPolicy(), decodes, mixed, joins=False)
    source = ClosedLoop(wl, prompt=wl.isl + 1, cached=wl.isl)
    run(lane, source)
    assert mixed and all(new == 1 and past == wl.isl for chunks, _ in mixed for new, past in chunks)
    lat = request_latencies_s(source.measured_requests())[0]
    assert min(lat["ttft"]) == pytest.approx(EAGER_US * 1e-6)


def test_a_request_waits_at_the_decode_worker_when_its_kv_does_not_fit():
    """Joining still needs a seat and KV room: with room for two sequences, the third waits for a finish."""
    wl = Workload(isl=1000, osl=20, concurrency=3, num_requests=12, range_ratio=0.0)
    decodes: list = []
    mixed: list = []
    lane = _lane(VllmPolicy(), decodes, mixed, joins=True, kv=2 * (wl.isl + wl.osl) + 10)
    source = ClosedLoop(wl, prompt=wl.isl, cached=wl.isl, arrived=True)
    run(lane, source)
    assert not mixed
    assert max(decodes) == 2
    lat = request_latencies_s(source.measured_requests())[0]
    assert max(lat["ttft"]) >= (wl.osl - 1) * DECODE_US * 1e-6  # a whole request's decode, waited for
