"""The discrete-event loop: pop an event, handle it, push what the handler returns.

Four events: a request arrives, the API server hands it to the scheduler, a step ends, the lane schedules its
next step. Entities never touch the
queue. Clocks: the lane carries three clocks (step times priced nominal, low and high). Closed-loop schedules
do not depend on time (a client sends when its last request ends, which is a step end), so one run prices the
same schedule three ways; open-loop runs are driven by one clock (`drive`) and repeated per clock by the
caller.
"""

from __future__ import annotations

import heapq
import itertools
from typing import NamedTuple

import numpy as np

from servelab.errors import ServelabError
from servelab.predict.serving.engine import Batch, Lane, Request
from servelab.predict.serving.workload import Workload
from servelab.traffic.lengths import LengthStream

INF = float("inf")


class Arrival(NamedTuple):
    """A client sends a request. The API server handles requests one at a time (HTTP, tokenizing) before the
    scheduler sees them, so a request sent while it is busy waits its turn: `Admit` hands it over."""

    time: float
    req: Request

    def handle(self, lane: Lane, source, horizon: float) -> list:
        req = self.req
        req.arrival = _at(lane, self.time, source.drive)
        source.on_arrival(req, lane)
        following = source.next_arrival()
        out = [] if following is None else [following]
        if lane.frontend:
            rate = lane.decode_rate if lane.num_decoding else 0.0
            cost = lane.lim.frontend_cost_s(req.prompt, rate, lane.streams)
            lane.frontend_free = max(self.time, lane.frontend_free) + cost
            out.append(Admit(lane.frontend_free, req))
            return out
        lane.add(req)
        if not lane.busy:
            out.append(Schedule(self.time))
        return out


class Admit(NamedTuple):
    """The API server hands a request to the scheduler."""

    time: float
    req: Request

    def handle(self, lane: Lane, source, horizon: float) -> list:
        lane.add(self.req)
        return [] if lane.busy else [Schedule(self.time)]


class StepEnd(NamedTuple):
    time: float
    batch: Batch

    def handle(self, lane: Lane, source, horizon: float) -> list:
        lane.busy = False
        streams = lane.streams
        # the requests this step may give their first token (only a streaming API server needs them)
        starting = [req for req, _, _ in self.batch.chunks if req.first is None] if streams else []
        done = lane.complete(self.batch)
        out = [Schedule(self.time)]
        seen = self.time  # when the client sees this step's tokens
        if streams:
            firsts = [req for req in starting if req.first is not None]
            delay = lane.stream_out(self.batch, len(firsts), self.time, source.drive)
            seen += delay
            for req in firsts:
                req.first = _later(req.first, delay)
            for req in done:
                req.finish = _later(req.finish, delay)
        for req in done:
            out.extend(source.on_finish(req, seen, lane))
        return out


class Schedule(NamedTuple):
    time: float

    def handle(self, lane: Lane, source, horizon: float) -> list:
        if lane.busy:
            return []
        drive = source.drive
        if lane.clock[drive] < self.time:  # idle until now: every clock moves on by the same gap
            gap = self.time - lane.clock[drive]
            lane.clock = [c + gap for c in lane.clock]
        batch = lane.schedule(horizon, drive)
        if batch is None:
            return []
        lane.busy = True
        return [StepEnd(lane.clock[drive] + batch.duration[drive], batch)]


# at one instant: arrivals and hand-overs, then step ends, then scheduling
_ORDER = {Arrival: 0, Admit: 0, StepEnd: 1, Schedule: 2}


def _later(clocks, delay: float) -> tuple:
    return (clocks[0] + delay, clocks[1] + delay, clocks[2] + delay)


def _at(lane: Lane, t: float, drive: int) -> tuple:
    """All clocks at instant t of the drive clock: each keeps its offset from the drive clock at the last step
    boundary (inside a step, or across an idle gap that every clock crosses alike)."""
    c = lane.clock
    d = t - c[drive]
    return (c[0] + d, c[1] + d, c[2] + d)


def run(lane: Lane, source) -> None:
    queue: list = []
    seq = itertools.count()
    push, pop = heapq.heappush, heapq.heappop
    for event in source.start():
        push(queue, (event.time, _ORDER[event.__class__], next(seq), event))
    while queue and not source.done:
        event = pop(queue)[3]
        horizon = queue[0][0] if queue else INF
        for new in event.handle(lane, source, horizon):
            push(queue, (new.time, _ORDER[new.__class__], next(seq), new))
    if not source.done:
        raise ServelabError(
            "simulation stalled: a waiting request can never be admitted (KV cache too small "
            "for one sequence, or a prompt longer than the token budget without chunked prefill)"
        )


class Source:
    """Makes the requests and decides when to stop; `measured` are the requests the statistics use."""

    drive = 0

    def __init__(self, wl: Workload, prompt: int | None = None, cached: int | None = None):
        self.wl = wl
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
            if self.lengths is None:
                rng = np.random.default_rng(self.wl.seed)
                self.lengths = LengthStream(prompt, osl, r, rng, self.wl.measured())
            prompt, osl = self.lengths[idx]
            prompt = max(1, prompt)  # an engine request has at least one prompt token
            cached = min(cached, prompt - 1)
        req = Request(idx, prompt, osl, cached)
        self.requests.append(req)
        return req

    def on_arrival(self, req: Request, lane: Lane) -> None:
        pass

    def next_arrival(self):
        return None


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

    def is_measured(self, req: Request) -> bool:
        return self.warmup <= req.idx < self.warmup + self.num_measured

    def start(self) -> list:
        return [Arrival(0.0, self._new()) for _ in range(self.c)]

    def on_arrival(self, req: Request, lane: Lane) -> None:
        if req.idx == self.warmup:  # the measuring window opens; ITL samples before it belong to the warm-up
            self.window[0] = (req.arrival, lane.emitted, lane.completed)
            lane.stats.itl.clear()

    def on_finish(self, req: Request, t: float, lane: Lane) -> list:
        if self.warmup <= req.idx < self.warmup + self.num_measured:  # is_measured(req)
            self.pending_measured -= 1
            if self.pending_measured == 0:
                self.window[1] = (req.finish, lane.emitted, lane.completed)
                self.done = True
                return []
        if len(self.requests) < self.warmup + self.num_measured + self.c:
            return [Arrival(t, self._new())]
        return []


class OpenLoop(Source):
    """Requests at fixed offsets (gamma gaps), whatever the engine does (no coordinated omission)."""

    def __init__(self, wl: Workload, drive: int = 0, **kw):
        super().__init__(wl, **kw)
        self.drive = drive
        self.offsets = wl.offsets()
        self.pending_measured = len(self.offsets)

    def is_measured(self, req: Request) -> bool:
        return True

    def start(self) -> list:
        return [self.next_arrival()] if self.offsets else []

    def next_arrival(self):
        i = len(self.requests)
        if i >= len(self.offsets):
            return None
        return Arrival(self.offsets[i], self._new())

    def on_arrival(self, req: Request, lane: Lane) -> None:
        if req.idx == 0:
            self.window[0] = (req.arrival, 0.0, 0)

    def on_finish(self, req: Request, t: float, lane: Lane) -> list:
        self.pending_measured -= 1
        if self.pending_measured == 0:
            self.window[1] = (req.finish, lane.emitted, lane.completed)
            self.done = True
        return []


class Replay:
    """A fixed list of requests, sent as a benchmark client sends them: request i (prompt, output and cached
    tokens from `requests[i]`) becomes due at `offsets[i]` seconds (all 0 for a closed loop) and is sent, in
    index order, once fewer than `limit` requests are in flight (vLLM's --max-concurrency semaphore; None: no
    limit). Every request is measured; its `arrival` is when it was sent."""

    def __init__(
        self,
        requests: list[tuple[int, int, int]],
        offsets: list[float],
        limit: int | None = None,
        drive: int = 0,
    ):
        if len(offsets) != len(requests):
            raise ServelabError("replay: one arrival offset per request")
        self.specs, self.offsets, self.limit, self.drive = requests, offsets, limit, drive
        self.requests: list[Request] = []
        self.in_flight = 0
        self.blocked = False  # the next request waits for a free slot
        self.last_sent = 0.0
        self.pending = len(requests)
        self.done = not requests

    def _send(self, t: float) -> Arrival | None:
        i = len(self.requests)
        if i >= len(self.specs):
            return None
        if self.limit is not None and self.in_flight >= self.limit:
            self.blocked = True
            return None
        prompt, osl, cached = self.specs[i]
        self.in_flight += 1
        req = Request(i, prompt, osl, cached)
        self.requests.append(req)
        return Arrival(max(t, self.offsets[i]), req)

    def start(self) -> list:
        return [e for e in (self._send(0.0),) if e is not None]

    def on_arrival(self, req: Request, lane: Lane) -> None:
        self.last_sent = req.arrival[self.drive]

    def next_arrival(self):
        # the arrival just handled took its slot; the next is sent at its own offset, never before this one
        return self._send(self.last_sent)

    def on_finish(self, req: Request, t: float, lane: Lane) -> list:
        self.in_flight -= 1
        self.pending -= 1
        if self.pending == 0:
            self.done = True
            return []
        if self.blocked:
            self.blocked = False
            return [e for e in (self._send(t),) if e is not None]
        return []
