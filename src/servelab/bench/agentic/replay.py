"""The trace replay in a worker process: sessions on lanes, each session's streams with their recorded waits.

A worker holds `lanes` sessions at a time (its share of --max-concurrency: concurrency counts sessions, as
InferenceX's replay counts trajectories); when one ends, the lane takes the worker's next session at once.
Inside a session the main agent's requests go one after another, each after its recorded wait once the one
before ended; a subagent stream starts its recorded wait after the main-agent request it follows, and runs
beside the main agent; a main-agent request that waited for subagents in the recording waits for them here
(trace.py). A failed request does not end its session: the next prompt comes from the trace, not from the
answer.

TraceWorker reuses the load generator's worker (servelab.bench.worker: connection pool, records written as
requests end, timeouts, the ready check and warm-ups, --max-seconds, Ctrl-C) and replaces only what is sent
when. Every request of a session that started, and of every session scheduled with --num-prompts, ends as a
record: sent (completed or failed) or not sent with the reason.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from time import perf_counter

from servelab.bench.agentic.prompts import StreamPrompt
from servelab.bench.agentic.trace import Trace, TraceRequest
from servelab.bench.client import RequestState
from servelab.bench.worker import Worker, WorkerSpec

KEY_STRIDE = 1_000_000  # a record's key: session number * KEY_STRIDE + the request's index in its trace
SESSION_STOPPED = "the session was stopped: {}"


@dataclass
class TraceItem:
    """What a record needs of a sent request (the worker's WorkItem interface)."""

    key: int
    payload: bytes
    prompt_len: int
    turns: tuple = ()  # no multiturn follow-ups: the session schedules its own


@dataclass
class TraceWorkerSpec(WorkerSpec):
    """A worker's share of a trace replay: sessions first, first + step, ... (`count` of them, or until the
    run stops when None), each replaying traces[number % num_traces]."""

    traces: dict[int, Trace] = field(default_factory=dict)
    num_traces: int = 1
    first: int = 0
    step: int = 1
    count: int | None = None
    lanes: int | None = None  # sessions at once; None: all
    nonce: int = 0  # the run's own: its prompts share no text with another run's


def salt_of(trace: Trace, number: int, num_traces: int, nonce: int) -> int:
    """The salt of a session's prompt text: the run's nonce with the session's number (local hash ids) or
    its pass over the file (global ones)."""
    n = number // num_traces if trace.shared_ids else number
    return (nonce << 32) + n + (1 << 31 if trace.shared_ids else 0)


class Replay:
    """One session being replayed: what each request is doing, each stream's prompt and progress."""

    __slots__ = (
        "done",
        "ended",
        "last_end",
        "number",
        "prompts",
        "sent",
        "start",
        "timers",
        "trace",
        "waiting",
    )

    def __init__(self, number: int, trace: Trace, salt: int, start: float = 0.0) -> None:
        self.number = number
        self.trace = trace
        self.start = start
        self.prompts = [StreamPrompt(salt, trace.block_size) for _ in trace.streams]
        self.sent = bytearray(trace.num_requests)  # 0: not yet; 1: sent; 2: recorded as not sent
        self.ended = 0  # requests that ended (answered, failed or recorded as not sent)
        self.last_end: list[float | None] = [None] * len(trace.streams)  # each stream's latest end
        self.done = [not s for s in trace.streams]  # each stream's last request ended
        self.timers: dict[int, tuple[asyncio.TimerHandle, float]] = {}  # request -> (timer, due)
        self.waiting: TraceRequest | None = None  # a main-agent request waiting for subagents

    @property
    def finished(self) -> bool:
        return self.ended >= self.trace.num_requests


class TraceWorker(Worker):
    """The worker's request loop, sending a trace's sessions instead of a list of requests."""

    spec: TraceWorkerSpec

    def __init__(self, spec, *args, **kwargs) -> None:
        super().__init__(spec, *args, **kwargs)
        self.sessions = _numbers(spec.first, spec.step, spec.count)
        self.active: dict[int, Replay] = {}
        self.exhausted = False

    # -- the run: sessions instead of items ------------------------------------------------------------------
    async def _drive(self, items, limit, closed, *rest) -> None:
        if not self.recording:  # the ready check and the warm-ups are plain requests
            await super()._drive(items, limit, closed, *rest)
            return
        self.done = self.loop.create_future()
        self.remaining = 1  # the base loop's count is not used here: `done` is set by _check_finished
        now = perf_counter()
        lanes = self.spec.lanes
        while not self.exhausted and (lanes is None or len(self.active) < lanes):
            self._start_next(now)
        self._check_finished()
        ticker = self.loop.create_task(self._tick())
        try:
            await self.done
        finally:
            ticker.cancel()

    def _start_next(self, now: float) -> None:
        number = next(self.sessions, None)
        if number is None or self.stopping():
            self.exhausted = True
            return
        trace = self.spec.traces[number % self.spec.num_traces]
        replay = Replay(number, trace, salt_of(trace, number, self.spec.num_traces, self.spec.nonce), now)
        self.active[number] = replay
        main = trace.streams[0]
        if main:
            self._after(replay, trace.requests[main[0]], now)
        for sid in trace.start_spawns:
            self._after(replay, trace.requests[trace.streams[sid][0]], now)
        if replay.finished:  # a trace of empty streams
            self._session_over(replay, now)

    def _after(self, replay: Replay, req: TraceRequest, base: float) -> None:
        """Send `req` its recorded wait after `base`, or hold it while the subagents it waits for run."""
        if not all(replay.done[s] for s in req.waits_for):
            replay.waiting = req
            return
        ends = [e for s in req.waits_for if (e := replay.last_end[s]) is not None]
        due = max([base, *ends]) + req.delay_s
        delay = due - perf_counter()
        if delay <= 0:
            self._send(replay, req, due)
        else:
            handle = self.loop.call_later(delay, self._send, replay, req, due)
            replay.timers[req.index] = (handle, due)

    def _send(self, replay: Replay, req: TraceRequest, due: float) -> None:
        replay.timers.pop(req.index, None)
        if self.stopping() or replay.sent[req.index]:
            return
        replay.sent[req.index] = 1
        # one user message on the chat API (the template wraps it), the prompt itself on the completions API
        text = replay.prompts[req.stream].text(req)
        payload = self.spec.template.encode(text, max(1, req.output_tokens))
        item = TraceItem(replay.number * KEY_STRIDE + req.index, payload, req.input_tokens)
        self._start(RequestState(item, payload, due, perf_counter()))

    def on_done(self, conn, st: RequestState, reusable: bool) -> None:
        if not self.recording:
            super().on_done(conn, st, reusable)
            return
        self.in_flight -= 1
        if conn is not None:
            self.pool.release(conn, reusable)
        rec, chunks = self.records.request(st)
        self.stats.request_done(rec["ok"], rec["out"], chunks)
        number, index = divmod(st.item.key, KEY_STRIDE)
        replay = self.active[number]
        replay.ended += 1
        if self.abort_reason is not None and not self.stopped:
            self._stop(self.abort_reason, cancel_in_flight=False)
        elif not self.stopping():
            self._next(replay, replay.trace.requests[index], st.end)
        if replay.finished:
            self._session_over(replay, st.end)
        self._check_finished()

    def _next(self, replay: Replay, req: TraceRequest, end: float) -> None:
        """What follows a request that ended: the subagents it starts, the next request of its stream, and
        the main-agent request that waited for its stream."""
        trace = replay.trace
        stream = trace.streams[req.stream]
        replay.last_end[req.stream] = end
        for sid in req.spawns:
            if trace.streams[sid]:
                self._after(replay, trace.requests[trace.streams[sid][0]], end)
        if req.turn + 1 < len(stream):
            self._after(replay, trace.requests[stream[req.turn + 1]], end)
            return
        replay.done[req.stream] = True
        held = replay.waiting
        if held is not None and all(replay.done[s] for s in held.waits_for):
            replay.waiting = None
            base = replay.last_end[0] if held.turn else replay.start
            self._after(replay, held, base if base is not None else end)

    def _session_over(self, replay: Replay, now: float) -> None:
        self.active.pop(replay.number, None)
        if not self.stopping():
            self._start_next(now)

    def _check_finished(self) -> None:
        if (
            not self.active
            and (self.exhausted or self.stopped)
            and self.in_flight == 0
            and self.done is not None
            and not self.done.done()
        ):
            self.done.set_result(None)

    # -- stopping -------------------------------------------------------------------------------------------
    def _stop(self, reason: str, cancel_in_flight: bool = True) -> None:
        """Send nothing more: every request not sent of the sessions started, and of the sessions scheduled
        (--num-prompts) that never started, is recorded as not sent; requests in flight end too, unless they
        may finish (--max-seconds)."""
        now = perf_counter()
        if not self.stopped:
            self.stopped = True
            for replay in self.active.values():
                self._abandon(replay, now, reason)
            if self.spec.count is not None:  # a bounded schedule: the sessions never started count as well
                for number in self.sessions:
                    self._abandon(self._replay(number), now, reason)
            self.exhausted = True
            for replay in [r for r in self.active.values() if r.finished]:
                self.active.pop(replay.number)
        if cancel_in_flight:
            self.pool.finish_all(now, reason)
        self._check_finished()

    def cancel(self, reason: str) -> None:
        """The run was stopped before it started: the scheduled sessions are recorded as never sent."""
        self.recording = True
        self.t0 = self.records.t0 = perf_counter()
        self.stopped = True
        if self.spec.count is not None:
            for number in self.sessions:
                self._abandon(self._replay(number), self.t0, reason)
        self.records.flush()

    def _replay(self, number: int) -> Replay:
        """A session that never started, to record its requests as not sent."""
        return Replay(number, self.spec.traces[number % self.spec.num_traces], 0)

    def _abandon(self, replay: Replay, now: float, reason: str) -> None:
        for handle, _due in replay.timers.values():
            handle.cancel()
        for req in replay.trace.requests:
            if replay.sent[req.index]:
                continue
            replay.sent[req.index] = 2
            replay.ended += 1
            due = replay.timers.get(req.index, (None, now))[1]
            key = replay.number * KEY_STRIDE + req.index
            self.records.not_sent(key, req.input_tokens, due, reason)
        replay.timers.clear()
        replay.waiting = None


def _numbers(first: int, step: int, count: int | None):
    """The worker's session numbers: first, first + step, ... (count of them, or without end)."""
    n, k = first, 0
    while count is None or k < count:
        yield n
        n += step
        k += 1
