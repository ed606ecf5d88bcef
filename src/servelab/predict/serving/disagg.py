"""A disaggregated deployment simulated request by request: every lane of a prefill pool and of a decode pool
in one event loop.

A request's way: the client (simulator.Replay, the aggregated twin's client: a closed loop at its concurrency
limit, or an open loop at its offsets) sends it; the router picks a prefill worker (`Router`), whose API
server takes it in and whose scheduler prefills it (a Lane with the engine's policy; the prompt and one output
token, the first, sampled by the prefill step); its KV cache then moves to a decode worker the router picks,
in `transfer_s(prompt)` seconds, and arrives there as a request whose prompt is in the KV cache (a joining
lane, Lane.joins: it joins the decoding batch when the step in progress ends; else a one-token prompt chunk,
vLLM's last prompt token computed again, whose step gives the first token). The client sees the first token
from the decode worker, and in a closed loop sends its next request when one ends.

One loop, not one per lane: the pools are coupled through the client (a closed loop sends when a decode
ends) and through the router (its pick reads every worker's load), so all lanes' events share one queue, in
time order. Events are (time, order at an instant, sequence number, kind, lane index, object); at one instant
sends, hand-overs and KV arrivals come first, then step ends, then scheduling. A lane's stretch of identical
decode steps runs to its own next finish (Lane.schedule without a horizon); a request that arrives at the
lane during it cuts it at the end of the step in progress (`_cut`), where it joins, as it would: a lane's
stretch never waits on the other lanes' events, which do not touch it. The schedule depends on the step
times of every lane, so a run follows one clock (`drive`) and the caller re-runs per clock; a record's times
are those of that clock.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from servelab.errors import ServelabError
from servelab.predict.serving.engine import Batch, Lane, Request
from servelab.predict.serving.simulator import Replay, without_gc

RouterPolicy = Literal["round-robin", "least-loaded"]
ROUTER_POLICIES: tuple[RouterPolicy, ...] = ("round-robin", "least-loaded")
INF = float("inf")

# event kinds; order at an instant: sends, hand-overs and KV arrivals (0), then step ends (1), scheduling (2)
SEND, ADMIT, KV_IN, STEP_END, SCHEDULE = 0, 1, 2, 3, 4


class Router:
    """Picks a worker of one pool for each request. round-robin: in turn (vLLM's production-stack PD router,
    SGLang's router with --prefill-policy / --decode-policy round_robin); least-loaded: the worker with the
    least outstanding work, the lowest index on a tie (Dynamo's least-loaded router mode; its KV router
    weighs the same load against prefix overlap, which random prompts do not have). Within a worker its
    lanes (attention-DP ranks) take requests in turn."""

    def __init__(self, policy: RouterPolicy, lanes: list[list[int]]):
        if policy not in ROUTER_POLICIES:
            raise ServelabError(
                f"expected one of {', '.join(ROUTER_POLICIES)}, got {policy!r}", field="router"
            )
        self.policy = policy
        self.lanes = lanes  # per worker, its lanes' indices
        self.load = [0.0] * len(lanes)  # per worker, its outstanding work (the pool says in what)
        self.turn = 0
        self.rank_turn = [0] * len(lanes)

    def pick(self) -> tuple[int, int]:
        """The worker for the next request and its lane."""
        if self.policy == "round-robin":
            worker = self.turn
            self.turn = (worker + 1) % len(self.lanes)
        else:
            load = self.load
            worker = load.index(min(load))
        ranks = self.lanes[worker]
        k = self.rank_turn[worker]
        self.rank_turn[worker] = (k + 1) % len(ranks)
        return worker, ranks[k]


@dataclass
class DisaggRun:
    """One run's outcome: the client's requests (times of the drive clock; `first` and `finish` as the client
    sees them), and per request when its prefill ended and when its KV cache reached the decode worker."""

    requests: list[Request]
    prefill_done: dict[int, float] = field(default_factory=dict)
    kv_arrived: dict[int, float] = field(default_factory=dict)


def run_disagg(
    prefill: list[list[Lane]],
    decode: list[list[Lane]],
    client: Replay,
    transfer_s: Callable[[int], float],
    router: RouterPolicy,
) -> DisaggRun:
    """Simulate until the client is done. `prefill` / `decode`: per worker, its lanes; the decode lanes join
    arrived requests where they were made to (Lane.joins)."""
    return without_gc(_loop, prefill, decode, client, transfer_s, router)


def _loop(prefill, decode, client: Replay, transfer_s, router_policy) -> DisaggRun:
    lanes: list[Lane] = []
    worker_of: list[int] = []
    is_prefill: list[bool] = []
    routers = []
    for pool, first in ((prefill, True), (decode, False)):
        indices = []
        for w, worker in enumerate(pool):
            indices.append(list(range(len(lanes), len(lanes) + len(worker))))
            lanes.extend(worker)
            worker_of.extend([w] * len(worker))
            is_prefill.extend([first] * len(worker))
        routers.append(Router(router_policy, indices))
    to_prefill, to_decode = routers  # prefill load: prompt tokens to compute; decode load: requests held
    drive = client.drive
    out = DisaggRun(client.requests)
    queue: list = []
    seq = itertools.count()
    push, pop = heapq.heappush, heapq.heappop
    current: list[Batch | None] = [None] * len(lanes)  # the batch in progress on each lane
    for t, rec in client.start():
        push(queue, (t, 0, next(seq), SEND, -1, rec))
    while not client.done:
        if not queue:
            raise ServelabError(
                "simulation stalled: a waiting request can never be admitted (KV cache too small for one "
                "sequence, or a prompt longer than the token budget without chunked prefill)"
            )
        t, _, _, kind, i, obj = pop(queue)
        if kind == SEND:
            obj.arrival = (t, t, t)
            new = client.on_arrival(obj, None)  # type: ignore[arg-type]  # the client reads no lane
            if new is not None:
                push(queue, (new[0], 0, next(seq), SEND, -1, new[1]))
            w, i = to_prefill.pick()
            to_prefill.load[w] += obj.prompt - obj.cached
            lane = lanes[i]
            req = Request(obj.idx, obj.prompt, 1, obj.cached)  # the prefill step samples the first token
            if lane.frontend:  # its API server takes requests in one at a time (simulator._loop's ARRIVAL)
                free = max(t, lane.frontend_free) + lane.lim.frontend_cost_s(req.prompt, lane.decode_rate)
                lane.frontend_free = free
                push(queue, (free, 0, next(seq), ADMIT, i, req))
            else:
                _hand_over(lane, req, t, i, queue, seq, current, drive)
        elif kind == ADMIT:
            _hand_over(lanes[i], obj, t, i, queue, seq, current, drive)
        elif kind == KV_IN:
            out.kv_arrived[obj.idx] = t
            w, i = to_decode.pick()
            lane = lanes[i]
            if lane.joins and obj.osl == 1:  # the prefill worker's token was all of it
                obj.first = obj.finish = (t, t, t)
                new = client.on_finish(obj, t, None)  # type: ignore[arg-type]
                if new is not None:
                    push(queue, (new[0], 0, next(seq), SEND, -1, new[1]))
                continue
            to_decode.load[w] += 1
            if lane.joins:  # its prompt's KV and first token arrived: it joins the decoding batch
                req = Request(obj.idx, obj.prompt, obj.osl, obj.prompt)
            else:  # its last prompt token is computed again, a one-token chunk sampling the first token
                req = Request(obj.idx, obj.prompt + 1, obj.osl, obj.prompt)
            _hand_over(lane, req, t, i, queue, seq, current, drive)
        elif kind == STEP_END:
            if obj is not current[i]:  # a stretch cut short since (its end is queued anew)
                continue
            current[i] = None
            lane = lanes[i]
            lane.busy = False
            done = lane.complete(obj)
            w = worker_of[i]
            for req in done:
                rec = client.requests[req.idx]
                if is_prefill[i]:
                    to_prefill.load[w] -= rec.prompt - rec.cached
                    out.prefill_done[req.idx] = t
                    push(queue, (t + transfer_s(rec.prompt), 0, next(seq), KV_IN, -1, rec))
                    continue
                to_decode.load[w] -= 1
                first = req.first[drive]
                rec.first, rec.finish = (first, first, first), (t, t, t)
                new = client.on_finish(rec, t, None)  # type: ignore[arg-type]
                if new is not None:
                    push(queue, (new[0], 0, next(seq), SEND, -1, new[1]))
            push(queue, (t, 2, next(seq), SCHEDULE, i, None))
        else:  # SCHEDULE
            lane = lanes[i]
            if lane.busy:
                continue
            lane.idle_until(t, drive)
            batch = current[i] = lane.schedule(INF, drive)
            if batch is None:
                continue
            lane.busy = True
            push(queue, (lane.clock[drive] + batch.duration[drive], 1, next(seq), STEP_END, i, batch))
    return out


def _hand_over(
    lane: Lane, req: Request, t: float, i: int, queue: list, seq, current: list, drive: int
) -> None:
    """The scheduler of lane i has the request from time t (the drive clock's): it is scheduled now if the
    lane is idle, else when the step in progress ends."""
    req.arrival = (t, t, t)
    lane.add(req)
    if not lane.busy:
        heapq.heappush(queue, (t, 2, next(seq), SCHEDULE, i, None))
        return
    cut = _cut(lane, current[i], t, drive)
    if cut is not None:
        current[i] = cut
        heapq.heappush(queue, (lane.clock[drive] + cut.duration[drive], 1, next(seq), STEP_END, i, cut))


def _cut(lane: Lane, batch: Batch, t: float, drive: int) -> Batch | None:
    """A stretch of decode steps in progress cut to end with its step in progress at t, or None where that is
    its last step. The steps keep the stretch's price (priced at its middle: the cut steps come earlier,
    with a little less KV, the few per cent of a step time that holds between two prices)."""
    if batch.steps == 1:
        return None
    d = batch.duration
    one = d[drive] / batch.steps
    steps = int((t - lane.clock[drive]) / one) + 1  # the lane's clock is the stretch's start until it ends
    if steps >= batch.steps:
        return None
    k = steps / batch.steps
    return Batch(steps, batch.decodes, batch.kv_mean, batch.chunks, (d[0] * k, d[1] * k, d[2] * k))
