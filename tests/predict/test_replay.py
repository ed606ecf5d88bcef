"""The simulator's Replay source: an explicit request list with send offsets and a concurrency limit, as a
benchmark client sends it."""

import pytest

from servelab.errors import ServelabError
from servelab.perfdb.db import perfdb_for
from servelab.predict.engines import engine_profile
from servelab.predict.serving import StepPricer, Workload
from servelab.predict.serving.aggregated import lane_limits
from servelab.predict.serving.engine import Lane
from servelab.predict.serving.simulator import Replay, run
from servelab.predict.static import prepare
from servelab.specs import Parallel, load_model, load_system

SYS = load_system("h200_sxm")
MODEL = load_model("qwen3-32b")
TP2 = Parallel(tp=2)
ENGINE = engine_profile("vllm")


def _replay(requests, offsets, limit=None, drive=0, workers=1) -> Replay:
    mem = prepare(MODEL, SYS, TP2, ENGINE.max_num_batched_tokens)
    pricer = StepPricer(MODEL, TP2, ENGINE, perfdb_for(SYS))
    wl = Workload(isl=max(p for p, _, _ in requests), osl=max(o for _, o, _ in requests), concurrency=1)
    lane = Lane(lane_limits(MODEL, TP2, ENGINE, mem, wl), ENGINE.policy, pricer.decode, pricer.mixed)
    source = Replay(requests, offsets, limit, drive, workers)
    run(lane, source)
    return source


def test_closed_loop_sends_the_first_wave_at_zero_and_the_rest_as_slots_free():
    source = _replay([(500, 20, 0)] * 6, [0.0] * 6, limit=2)
    sent = [r.arrival[0] for r in source.requests]
    finished = sorted(r.finish[0] for r in source.requests)
    assert sent[:2] == [0.0, 0.0]
    # request i (i >= 2) is sent the moment the (i-1)-th request to finish ends
    assert sent[2:] == pytest.approx(finished[:4])
    assert all(r.first is not None and r.finish is not None for r in source.requests)


def test_open_loop_sends_at_the_offsets_unless_the_limit_holds_them():
    offsets = [0.0, 0.001, 0.002, 5.0]
    free = _replay([(300, 10, 0)] * 4, offsets)
    assert [r.arrival[0] for r in free.requests] == pytest.approx(offsets)
    held = _replay([(300, 10, 0)] * 4, offsets, limit=1)
    sent = [r.arrival[0] for r in held.requests]
    assert sent[0] == 0.0 and sent[1] == pytest.approx(held.requests[0].finish[0])
    assert sent[3] == pytest.approx(5.0)  # the slot was free long before its offset


def test_each_request_keeps_its_own_lengths():
    source = _replay([(100, 5, 0), (900, 30, 0), (400, 1, 0)], [0.0] * 3)
    assert [(r.prompt, r.osl) for r in source.requests] == [(100, 5), (900, 30), (400, 1)]


def test_one_offset_per_request():
    with pytest.raises(ServelabError, match="one arrival offset per request"):
        Replay([(100, 5, 0)], [0.0, 1.0])


def test_client_workers_each_send_their_own_requests_in_turn():
    """servelab bench's worker processes: request i is worker i mod 4's, and a slot a worker frees takes that
    worker's next request (a chain per client with one slot each)."""
    requests = [(300, 10 + 7 * (i % 4), 0) for i in range(12)]  # worker 0's requests end first
    chains = _replay(requests, [0.0] * 12, limit=4, workers=4)
    reqs = chains.requests
    assert [r.arrival[0] for r in reqs[:4]] == [0.0] * 4
    for i in range(4, 12):  # sent the moment the same worker's previous request ended
        assert reqs[i].arrival[0] == pytest.approx(reqs[i - 4].finish[0])
    one = _replay(requests, [0.0] * 12, limit=4)  # one queue: the next request takes the first free slot
    ends = sorted(r.finish[0] for r in one.requests)
    assert [r.arrival[0] for r in one.requests[4:]] == pytest.approx(ends[:8])


def test_a_worker_sends_under_its_share_of_the_limit():
    """Four slots over three workers: 2, 1, 1 (split_limit); worker 0 (requests 0, 3, 6) runs two at once."""
    source = Replay([(100, 5, 0)] * 9, [0.0] * 9, limit=4, workers=3)
    started = [req for _, req in source.start()]
    assert [req.idx for req in started] == [0, 1, 2]
    for req in started:
        req.arrival = (0.0, 0.0, 0.0)  # the simulator sets it when the request arrives
    lane = None  # Replay does not read the lane
    assert source.on_arrival(started[0], lane)[1].idx == 3  # type: ignore[index, arg-type]
    assert source.on_arrival(started[1], lane) is None  # type: ignore[arg-type]  # its one slot is taken
    assert Replay([(100, 5, 0)] * 2, [0.0] * 2, limit=8, workers=4).workers == 2  # no more than requests
