"""The discrete-event loop: pop the earliest event, handle it, queue what it makes.

Four kinds of event: a request arrives, the API server hands it to the scheduler, a step ends, the lane
schedules its next step. At one instant arrivals and hand-overs come first, then the step end, then
scheduling; events of the same rank at one instant are handled in the order they were made. Clocks: the lane
carries three clocks (step times priced nominal, low and high). Closed-loop schedules do not depend on time (a
client sends when its last request ends, which is a step end), so one run prices the same schedule three
ways; open-loop runs are driven by one clock (`drive`) and repeated per clock by the caller.

The loop is one function over plain tuples, the lane's own state and the source's three calls: events are
(time, order at an instant, sequence number, kind, request or batch). A step's end and the scheduling that
follows it, most of a run's events, are handled at once, without the queue, when nothing queued comes first
(what the queue would have given next; the time and the order of every event are those it would have had).
"""

from __future__ import annotations

import gc
import heapq
import itertools
from typing import TYPE_CHECKING

from servelab.errors import ServelabError
from servelab.predict.serving.engine import FRONTEND_MAX_BUSY, Lane, Request
from servelab.predict.serving.workload import Workload
from servelab.traffic.lengths import LengthStream
from servelab.traffic.schedule import split_limit

if TYPE_CHECKING:  # numpy imported when first used (servelab.lazy_numpy says why): a plan whose
    import numpy as np  # simulations were all kept (servelab.predict.serving.kept) draws no lengths
else:
    from servelab.lazy_numpy import np

INF = float("inf")

# event kinds; an event's order at an instant: arrivals and hand-overs, then step ends, then scheduling
ARRIVAL, ADMIT, STEP_END, SCHEDULE = 0, 1, 2, 3


def run(lane: Lane, source) -> None:
    """Simulate until the source is done; requests keep their times (Request.arrival, first, finish)."""
    without_gc(_loop, lane, source)


def without_gc(fn, *args):
    """fn(*args) with the cyclic garbage collector paused. A simulation makes tens of thousands of small
    tuples and objects and no reference cycles, so the collector's passes over them find nothing (they cost
    a few per cent of a simulation); what fn made and dropped is freed by its reference counts before the
    collector runs again, so no later pass looks at it either."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return fn(*args)
    finally:
        if collecting:
            gc.enable()


def _loop(lane: Lane, source) -> None:
    queue: list = []
    seq = itertools.count()
    push, pop = heapq.heappush, heapq.heappop
    drive = source.drive
    lim = lane.lim
    schedule, complete = lane.schedule, lane.complete  # looked up once (a test may wrap lane.schedule)
    stream_out = lane.stream_out
    arrived, finished = source.on_arrival, source.on_finish
    frontend, streams = lane.frontend, lane.streams
    front_s, front_token_s, front_out_s = lim.frontend_s, lim.frontend_token_s, lim.frontend_out_token_s
    waiting, late, ahead = lane.waiting, lane.late, lane.ahead
    for t, req in source.start():
        push(queue, (t, 0, next(seq), ARRIVAL, req))
    kind = -1  # the event in hand (-1: none, pop the next)
    while not source.done:
        if kind < 0:
            if not queue:
                raise ServelabError(
                    "simulation stalled: a waiting request can never be admitted (KV cache too small "
                    "for one sequence, or a prompt longer than the token budget without chunked prefill)"
                )
            t, _, _, kind, obj = pop(queue)

        if kind == STEP_END:
            lane.busy = False
            # the requests this step may give their first token (only a streaming API server needs them; a
            # decode-only batch, most of them, has none)
            chunks = obj.chunks
            starting = [req for req, _, _ in chunks if req.first is None] if streams and chunks else None
            done = complete(obj)
            seen = t  # when the client sees this step's tokens
            if streams:
                firsts = [req for req in starting if req.first is not None] if starting else ()
                delay = stream_out(obj, len(firsts), t, drive)
                seen += delay
                for req in firsts:
                    req.first = _later(req.first, delay)
                for req in done:
                    req.finish = _later(req.finish, delay)
            for req in done:
                new = finished(req, seen, lane)
                if new is not None:
                    push(queue, (new[0], 0, next(seq), ARRIVAL, new[1]))
            if source.done:
                break
            if queue and queue[0][0] <= t:  # something queued comes first
                push(queue, (t, 2, next(seq), SCHEDULE, None))
                kind = -1
                continue
            kind = SCHEDULE  # handled next, below

        if kind == SCHEDULE:
            kind = -1
            if lane.busy:
                continue
            c = lane.clock
            if c[drive] < t:  # idle until now: every clock moves on by the same gap
                gap = t - c[drive]
                lane.clock = (c[0] + gap, c[1] + gap, c[2] + gap)
            horizon = queue[0][0] if queue else INF
            if late:  # formed ahead without them; they may join the step after this one
                batch = schedule(horizon, drive, True)
                waiting.extend(late)
                late.clear()
                if batch is None:  # nothing was formed ahead: the scheduler takes them now
                    batch = schedule(horizon, drive)
            else:
                batch = schedule(horizon, drive)
            if batch is None:
                continue
            lane.busy = True
            t = lane.clock[drive] + batch.duration[drive]
            if queue and queue[0][0] <= t:  # something queued comes first
                push(queue, (t, 1, next(seq), STEP_END, batch))
            else:
                kind, obj = STEP_END, batch
            continue

        if kind == ARRIVAL:
            # a client sends a request; the API server handles requests one at a time (HTTP, tokenizing)
            # before the scheduler sees them, so one sent while it is busy waits its turn (ADMIT)
            c = lane.clock
            d = t - c[drive]
            # all clocks at instant t of the drive clock: each keeps its offset from the drive clock at the
            # last step boundary (inside a step, or across an idle gap that every clock crosses alike)
            # (at a step boundary d is 0 and the clocks are the lane's: x + 0.0 is x for x >= 0)
            obj.arrival = c if d == 0.0 else (c[0] + d, c[1] + d, c[2] + d)
            new = arrived(obj, lane)  # the next request the source sends
            if new is not None:
                push(queue, (new[0], 0, next(seq), ARRIVAL, new[1]))
            kind = -1
            if frontend:  # LaneLimits.frontend_cost_s inline (the same operations, without a call)
                cost = front_s + front_token_s * obj.prompt
                if not streams:
                    busy = front_out_s * lane.decode_rate if lane.num_decoding else front_out_s * 0.0
                    if busy > FRONTEND_MAX_BUSY:
                        busy = FRONTEND_MAX_BUSY
                    cost = cost / (1.0 - busy)
                free = lane.frontend_free
                lane.frontend_free = free = (t if t > free else free) + cost
                push(queue, (free, 0, next(seq), ADMIT, obj))
                continue
        kind = -1  # a hand-over (or an arrival without an API server): the scheduler has the request
        lane.arrived += 1  # Lane.add inline
        if ahead and lane.busy:  # the next step was formed when this one began
            late.append(obj)
            continue
        waiting.append(obj)
        if not lane.busy:
            push(queue, (t, 2, next(seq), SCHEDULE, None))


def _later(clocks, delay: float) -> tuple:
    return (clocks[0] + delay, clocks[1] + delay, clocks[2] + delay)


# what a source makes: a request and the time (drive clock) its client sends it
Sent = tuple[float, Request]


class Source:
    """Makes the requests and decides when to stop; `measured_requests` are those the statistics use. The loop
    calls `start` once (the first requests sent), `on_arrival` as each request arrives and `on_finish` as each
    ends (the request sent then, if any)."""

    drive = 0

    def __init__(
        self, wl: Workload, prompt: int | None = None, cached: int | None = None, arrived: bool = False
    ):
        """arrived: every request's whole prompt is in the KV cache (a disaggregated decode worker)."""
        self.wl = wl
        self.arrived = arrived
        self.prompt = wl.isl if prompt is None else prompt
        self.cached = wl.cached_tokens if cached is None else cached
        self.osl, self.range_ratio = wl.osl, wl.range_ratio  # read for every request
        self.requests: list[Request] = []
        self.lengths: LengthStream | None = None  # drawn at the first request: `prompt` may be set until then
        self.pending_measured = 0
        self.done = False
        self.window: list = [
            None,
            None,
        ]  # (clocks, tokens emitted, requests completed) at the window's start and end

    def _new(self) -> Request:
        idx, r = len(self.requests), self.range_ratio
        prompt, osl, cached = self.prompt, self.osl, self.cached
        if r:  # per-request lengths by the load generator's rule, reproducible from the seed
            lengths = self.lengths
            if lengths is None:
                rng = np.random.default_rng(self.wl.seed)
                lengths = self.lengths = LengthStream(prompt, osl, r, rng, self.wl.measured())
            if idx < len(lengths.inputs):  # drawn already: read without a call (LengthStream.__getitem__)
                prompt, osl = lengths.inputs[idx], lengths.outputs[idx]
            else:
                prompt, osl = lengths[idx]
            if prompt < 1:  # an engine request has at least one prompt token
                prompt = 1
            if self.arrived:
                cached = prompt
            elif cached > prompt - 1:
                cached = prompt - 1
        req = Request(idx, prompt, osl, cached)
        self.requests.append(req)
        return req


class ClosedLoop(Source):
    """C clients, each sending its next request the moment its last one ends (vLLM --max-concurrency with
    request_rate inf). The first `warmup` requests fill the engine; the next `measured` are measured; clients
    keep sending until those finish, so the batch never drains while measuring."""

    def __init__(self, wl: Workload, **kw):
        super().__init__(wl, **kw)
        self.c = wl.clients
        self.warmup = wl.clients if wl.warmup is None else wl.warmup
        self.num_measured = wl.measured()
        self.pending_measured = self.num_measured
        self.measured_end = self.warmup + self.num_measured  # the first request after the measured ones
        self.last = self.measured_end + self.c  # requests made in all

    def measured_requests(self) -> list[Request]:
        """The measured requests that finished, in index order."""
        return [r for r in self.requests[self.warmup : self.measured_end] if r.finish is not None]

    def start(self) -> list[Sent]:
        return [(0.0, self._new()) for _ in range(self.c)]

    def on_arrival(self, req: Request, lane: Lane) -> None:
        if req.idx == self.warmup:  # the measuring window opens; ITL samples before it belong to the warm-up
            self.window[0] = (req.arrival, lane.emitted, lane.completed)
            lane.stats.itl.clear()

    def on_finish(self, req: Request, t: float, lane: Lane) -> Sent | None:
        if self.warmup <= req.idx < self.measured_end:  # a measured request
            self.pending_measured -= 1
            if self.pending_measured == 0:
                self.window[1] = (req.finish, lane.emitted, lane.completed)
                self.done = True
                return None
        if len(self.requests) < self.last:
            return (t, self._new())
        return None


class OpenLoop(Source):
    """Requests at fixed offsets (gamma gaps), whatever the engine does (no coordinated omission)."""

    def __init__(self, wl: Workload, drive: int = 0, **kw):
        super().__init__(wl, **kw)
        self.drive = drive
        self.offsets = wl.offsets()
        self.pending_measured = len(self.offsets)

    def measured_requests(self) -> list[Request]:
        """The requests that finished, in index order."""
        return [r for r in self.requests if r.finish is not None]

    def start(self) -> list[Sent]:
        return [(self.offsets[0], self._new())] if self.offsets else []

    def on_arrival(self, req: Request, lane: Lane) -> Sent | None:
        if req.idx == 0:
            self.window[0] = (req.arrival, 0.0, 0)
        i = len(self.requests)  # the next request, at its own offset
        return (self.offsets[i], self._new()) if i < len(self.offsets) else None

    def on_finish(self, req: Request, t: float, lane: Lane) -> None:
        self.pending_measured -= 1
        if self.pending_measured == 0:
            self.window[1] = (req.finish, lane.emitted, lane.completed)
            self.done = True


class Replay:
    """A fixed list of requests, sent as a benchmark client sends them: request i (prompt, output and cached
    tokens from `requests[i]`) becomes due at `offsets[i]` seconds (all 0 for a closed loop) and is sent, in
    index order, once fewer than `limit` requests are in flight (vLLM's --max-concurrency semaphore; None: no
    limit). Every request is measured; its `arrival` is when it was sent.

    `workers` above 1: the client is that many processes, as `servelab bench` runs (bench/runner.py
    worker_specs): request i is worker i mod `workers`'s, each worker sends its own requests in index order
    under its share of the limit (traffic.schedule.split_limit), and a slot a worker frees takes that
    worker's next request, not the next of all. With one slot a worker this is a chain per client: its
    requests are i, i + workers, ..."""

    def __init__(
        self,
        requests: list[tuple[int, int, int]],
        offsets: list[float],
        limit: int | None = None,
        drive: int = 0,
        workers: int = 1,
    ):
        if len(offsets) != len(requests):
            raise ServelabError("replay: one arrival offset per request")
        self.specs, self.offsets, self.limit, self.drive = requests, offsets, limit, drive
        # the real client never runs more workers than requests or concurrency (runner.num_workers_for)
        self.workers = max(1, min(workers, len(requests), limit or workers))
        self.limits = split_limit(limit, self.workers)
        self.requests: list[Request] = [None] * len(requests)  # type: ignore[list-item]  # filled as sent
        self.next = list(range(self.workers))  # each worker's next request
        self.in_flight = [0] * self.workers
        self.blocked = [False] * self.workers  # the worker's next request waits for a free slot
        self.pending = len(requests)
        self.done = not requests

    def _send(self, t: float, worker: int) -> Sent | None:
        i = self.next[worker]
        if i >= len(self.specs):
            return None
        limit = self.limits[worker]
        if limit is not None and self.in_flight[worker] >= limit:
            self.blocked[worker] = True
            return None
        prompt, osl, cached = self.specs[i]
        self.in_flight[worker] += 1
        self.next[worker] = i + self.workers
        req = self.requests[i] = Request(i, prompt, osl, cached)
        return (max(t, self.offsets[i]), req)

    def start(self) -> list[Sent]:
        sent = (self._send(0.0, worker) for worker in range(self.workers))
        return [s for s in sent if s is not None]

    def on_arrival(self, req: Request, lane: Lane) -> Sent | None:
        # the arrival took its slot; the worker's next is sent at its own offset, never before this one
        return self._send(req.arrival[self.drive], req.idx % self.workers)

    def on_finish(self, req: Request, t: float, lane: Lane) -> Sent | None:
        worker = req.idx % self.workers
        self.in_flight[worker] -= 1
        self.pending -= 1
        if self.pending == 0:
            self.done = True
            return None
        if self.blocked[worker]:
            self.blocked[worker] = False
            return self._send(t, worker)
        return None
