"""The disaggregated loop (servelab.predict.serving.disagg) on lanes priced by hand-computable step functions
(1 us per prompt token, 1 ms per decode step, a 2.5 ms KV transfer), so every time below follows from the
rules alone: a request's TTFT is its wait in the prefill queue, its prefill, the transfer and the decode
worker's part (the step in progress, then a one-token step, vLLM; or joining the batch, SGLang)."""

import pytest

from servelab.engines.sglang.policy import SglangPolicy
from servelab.engines.vllm.policy import VllmPolicy
from servelab.errors import ServelabError
from servelab.predict.serving.disagg import Router, run_disagg
from servelab.predict.serving.engine import Lane, LaneLimits
from servelab.predict.serving.simulator import Replay

MS = 1e-3
TRANSFER_S = 2.5 * MS


def _decode(n, kv):
    return (1000.0,) * 3


def _mixed(chunks, n, kv):
    return (sum(new for new, _ in chunks) + (1000.0 if n else 0.0),) * 3


LIMITS = LaneLimits(
    max_num_batched_tokens=600,
    max_num_seqs=256,
    chunked_prefill=True,
    kv_capacity=1e12,
    kv_fixed=0.0,
    kv_per_token=1.0,
)


def _run(
    policy,
    joins,
    requests,
    offsets=None,
    limit=None,
    prefill_workers=1,
    decode_workers=1,
    router="round-robin",
):
    pre = [[Lane(LIMITS, policy, _decode, _mixed)] for _ in range(prefill_workers)]
    dec = [[Lane(LIMITS, policy, _decode, _mixed, joins=joins)] for _ in range(decode_workers)]
    client = Replay(requests, offsets or [0.0] * len(requests), limit)
    return run_disagg(pre, dec, client, lambda prompt: TRANSFER_S, router)


def _ttft_ms(run, k):
    r = run.requests[k]
    return (r.first[0] - r.arrival[0]) / MS


def test_ttft_is_queue_prefill_transfer_and_the_decode_workers_first_step_vllm():
    # two 600-token prompts sent together; the 600-token budget prefills one a step (0.6 ms each)
    run = _run(VllmPolicy(), False, [(600, 4, 0), (600, 4, 0)])
    assert run.prefill_done[0] == pytest.approx(0.6 * MS) and run.prefill_done[1] == pytest.approx(1.2 * MS)
    assert run.kv_arrived[1] - run.prefill_done[1] == pytest.approx(TRANSFER_S)
    # A: prefill 0.6 + transfer 2.5 + its one-token step (1 us) alone on the idle decode worker
    assert _ttft_ms(run, 0) == pytest.approx(0.6 + 2.5 + 0.001)
    # B: 0.6 behind A + prefill 0.6 + transfer 2.5; it arrives at 3.7 ms inside A's decode step (3.101 to
    # 4.101), waits 0.401 for it, then its one-token chunk beside A's decode: 1.001 ms
    assert _ttft_ms(run, 1) == pytest.approx(0.6 + 0.6 + 2.5 + 0.401 + 1.001)


def test_ttft_joining_the_decode_batch_sglang():
    run = _run(SglangPolicy(), True, [(600, 4, 0), (600, 4, 0)])
    # A joins the idle decode worker as its KV arrives: the first token the prefill step sampled is delivered
    assert _ttft_ms(run, 0) == pytest.approx(0.6 + 2.5)
    # B arrives at 3.7 ms, in A's decode step (3.1 to 4.1), and joins when it ends
    assert _ttft_ms(run, 1) == pytest.approx(0.6 + 0.6 + 2.5 + 0.4)
    # then 3 more tokens, one a step: B's decode steps are shared with A's last one
    assert (run.requests[1].finish[0] - run.requests[1].first[0]) / MS == pytest.approx(3.0)


def test_a_saturated_prefill_worker_queues_every_later_request():
    # a request every 0.4 ms, a prefill of 0.6 ms each: the queue grows by 0.2 ms a request
    n = 12
    run = _run(VllmPolicy(), False, [(600, 2, 0)] * n, offsets=[0.4 * MS * k for k in range(n)])
    for k in range(n):
        assert run.prefill_done[k] == pytest.approx(0.6 * MS * (k + 1))
    waits = [run.prefill_done[k] - run.requests[k].arrival[0] for k in range(n)]
    assert all(b - a == pytest.approx(0.2 * MS) for a, b in zip(waits, waits[1:], strict=False))
    # the TTFT carries the prefill queue (and, at this pace, the decode worker's own wait)
    ttfts = [_ttft_ms(run, k) for k in range(n)]
    assert ttfts[-1] - ttfts[0] >= 0.2 * (n - 1)


def test_two_prefill_workers_keep_up_where_one_could_not():
    n = 12
    one = _run(VllmPolicy(), False, [(600, 2, 0)] * n, offsets=[0.4 * MS * k for k in range(n)])
    two = _run(
        VllmPolicy(), False, [(600, 2, 0)] * n, offsets=[0.4 * MS * k for k in range(n)], prefill_workers=2
    )
    # round robin: each worker gets a request every 0.8 ms and prefills it in 0.6: no queue
    for k in range(n):
        assert two.prefill_done[k] - two.requests[k].arrival[0] == pytest.approx(0.6 * MS)
    assert _ttft_ms(two, n - 1) < _ttft_ms(one, n - 1)


def test_a_closed_loop_keeps_its_clients_in_flight():
    c, n = 3, 20
    run = _run(SglangPolicy(), True, [(600, 5, 0)] * n, limit=c, decode_workers=2)
    reqs = run.requests
    last_send = max(r.arrival[0] for r in reqs)
    for r in reqs:
        t = r.arrival[0]
        if t < last_send:
            in_flight = sum(1 for q in reqs if q.arrival[0] <= t < q.finish[0])
            assert in_flight == c


def test_routers_pick_in_turn_or_the_least_loaded_worker():
    rr = Router("round-robin", [[0, 1], [2]])
    assert [rr.pick() for _ in range(4)] == [(0, 0), (1, 2), (0, 1), (1, 2)]
    least = Router("least-loaded", [[0], [1], [2]])
    least.load = [5.0, 0.0, 0.0]
    assert least.pick() == (1, 1)  # the lowest index of the least loaded
    least.load[1] = 1.0
    assert least.pick() == (2, 2)
    with pytest.raises(ServelabError, match="router"):
        Router("random", [[0]])  # type: ignore[arg-type]
