"""One load-generating process: for each bench it is given (one after another: processes.py keeps it for the
next), its own event loop, its share of the schedule, its own JSONL file. Worker runs the request loop; its
RecordWriter (records.py) writes the records and its Accounting (accounting.py) counts, publishes progress
and summarizes; run_bench opens the file and wires them.

Dispatch is callback-driven: arrivals (one chained timer at start + offset[i]) and completions call pump(),
which writes pre-serialized requests on idle keep-alive connections at once. No task per request, no
semaphore hop. Closed loop: a finished request frees its slot and the next request goes out in the same
callback; its scheduled time is that moment. A 100 ms tick handles timeouts, progress, stopping and flushing;
a 10 ms sampler measures event-loop lag.

Requests come from the parent over the feed pipe (feed.py), a batch at a time: the worker reads it while it
holds fewer unsent requests (pending, plus arrivals not yet due) than its window and stops reading above it,
so its memory follows its concurrency, not the run's length. Before it is ready it takes its first requests,
a window or a few MB of them, so a short run's requests are all made before it starts, as they always were.

A worker dies with its parent, whatever killed the parent: on Linux the kernel sends it SIGKILL
(PR_SET_PDEATHSIG); elsewhere, and as a fallback, the tick stops the run when the parent pid changes and the
closed pipe ends the process.
"""

from __future__ import annotations

import asyncio
import cProfile
import ctypes
import multiprocessing as mp
import os
import signal
import ssl
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from time import perf_counter

from servelab.bench.accounting import PROGRESS_SLOTS, Accounting
from servelab.bench.client import MAX_BODY_BYTES, RequestState, StreamConn
from servelab.bench.feed import FeedReader, WorkItem
from servelab.bench.payload import RequestTemplate
from servelab.bench.pool import ConnectionPool
from servelab.bench.records import RecordWriter

__all__ = ["MAX_SECONDS_REASON", "PROGRESS_SLOTS", "WorkItem", "WorkerSpec", "worker_main"]

MAX_SECONDS_REASON = (
    "max seconds ({} s) reached"  # why requests left when --max-seconds ran out were not sent
)


@dataclass
class WorkerSpec:
    index: int
    template: RequestTemplate
    num_items: int  # this worker's share of the requests, fed over its feed pipe
    max_in_flight: int | None
    timeout_s: float
    out_path: str
    max_body_bytes: int = MAX_BODY_BYTES
    warmups: list[bytes] = field(default_factory=list)
    ready_check: bytes | None = None
    keep_text: bool = False
    ttft_at_first_content: bool = False  # --ttft-at first-content: records start at the first text
    use_uvloop: bool = True
    preconnect: int = 0
    max_seconds: float | None = None  # stop sending this long after the start; in-flight requests finish
    open_loop: bool = False  # requests carry arrival offsets (a request rate), else a closed loop
    window: int = 1024  # unsent requests held at most (feed.window_for), once the first ones are sent
    first_items: int = 0  # requests read before the start (feed.first_items)


def _new_loop(use_uvloop: bool) -> tuple[asyncio.AbstractEventLoop, str]:
    if use_uvloop:
        try:
            import uvloop  # noqa: PLC0415 (optional extra, not in the core install)

            return uvloop.new_event_loop(), "uvloop"
        except ImportError:
            pass
    return asyncio.new_event_loop(), "asyncio"


PR_SET_PDEATHSIG = 1  # linux/prctl.h
INTERRUPTED = "interrupted (Ctrl-C or SIGTERM)"


def _die_with_parent() -> int:
    """Ask the kernel for SIGKILL when the parent dies (Linux); exit at once if it is already gone. Returns
    the parent's pid."""
    parent = mp.parent_process()
    parent_pid = parent.pid if parent is not None and parent.pid is not None else os.getppid()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass  # no prctl: the tick's pid check remains
    if os.getppid() != parent_pid:
        os._exit(1)
    return parent_pid


def worker_main(progress, stop_event, pipe, feed: Connection) -> None:
    """Process entry point (spawned): runs benches, one at a time, until told to exit or the parent goes (a
    pool of processes serves every bench of a run: processes.py). Protocol with the parent over `pipe`, for
    each bench: <- ("bench", spec, worker_cls, fed); -> ("ready", info) | ("error", msg);
    <- ("start", t0) | ("stop",); -> ("done", summary). <- ("exit",) ends the process. `progress` is this
    process's slots of the live line. The requests come over `feed` (feed.py) when `fed`; `worker_cls`
    replaces the request loop (a trace replay's sessions, which make their own requests:
    servelab.bench.agentic.replay)."""
    parent_pid = _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C and tells us via stop_event
    reader = FeedReader(feed)
    while True:
        try:
            msg = pipe.recv()
        except EOFError:
            return
        if msg[0] != "bench":
            return
        _, spec, worker_cls, fed = msg
        reader.next_feed()
        run_bench(spec, worker_cls or Worker, reader if fed else None, progress, stop_event, pipe, parent_pid)


def run_bench(
    spec: WorkerSpec,
    worker_cls: type[Worker],
    feed: FeedReader | None,
    progress,
    stop_event,
    pipe,
    parent_pid: int,
) -> None:
    """One bench in this process, on an event loop of its own: get ready, wait for the word, run, report.
    Its connections are closed at the end: the next bench opens its own."""
    loop, loop_kind = _new_loop(spec.use_uvloop)
    asyncio.set_event_loop(loop)
    out = open(spec.out_path, "w", buffering=1 << 16)
    tls = spec.template.target.tls_context()
    records = RecordWriter(out, spec.index, spec.keep_text, spec.ttft_at_first_content)
    w = worker_cls(spec, records, Accounting(spec.index, loop_kind, progress), stop_event, loop, tls, feed)
    w.parent_pid = parent_pid
    try:
        info = loop.run_until_complete(w.prepare())
        pipe.send(("ready", info))
        msg = pipe.recv()
        if msg[0] == "start":
            prof_dir = os.environ.get("SERVELAB_BENCH_PROFILE")  # debugging aid: cProfile each worker's run
            if prof_dir:
                prof = cProfile.Profile()
                prof.runcall(loop.run_until_complete, w.run(msg[1]))
                prof.dump_stats(os.path.join(prof_dir, f"worker-{spec.index}.prof"))
            else:
                loop.run_until_complete(w.run(msg[1]))
        else:
            w.cancel(INTERRUPTED)
        pipe.send(("done", w.stats.summary(w.abort_reason) | records.leftover()))
    except BaseException as e:  # report, never hang the parent
        try:
            pipe.send(("error", f"worker {spec.index}: {type(e).__name__}: {e}"))
        except OSError:
            pass
    finally:
        try:
            out.close()
        except OSError:
            pass
        w.pool.close()
        _close_loop(loop)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left on the loop (a connect under way), let the closed connections go, close it."""
    left = asyncio.all_tasks(loop)
    for task in left:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*left, asyncio.sleep(0), return_exceptions=True))
    loop.close()


class Worker:
    """The request loop of one process: dispatch (closed loop, open-loop arrivals, multiturn follow-ups),
    timeouts and stopping. Connections come from `pool`, records go to `records`, counters to `stats`."""

    def __init__(
        self,
        spec: WorkerSpec,
        records: RecordWriter,
        stats: Accounting,
        stop_event,
        loop,
        tls: ssl.SSLContext | None = None,
        feed: FeedReader | None = None,
    ) -> None:
        self.spec = spec
        self.feed = feed
        self.feed_open = False  # more requests may come from the feed (the run's drive only)
        self.reading = False  # the feed's pipe is watched by the loop
        self.first: list[WorkItem] = []  # the first window, read before the start
        self.records = records
        self.stats = stats
        self.stop_event = stop_event
        self.loop = loop
        self.pool = ConnectionPool(spec.template.target, tls, self, loop, stats, spec.max_body_bytes)
        self.limit = spec.max_in_flight
        self.pending: deque = deque()
        self.in_flight = 0
        self.remaining = 0
        self.recording = False
        self.done: asyncio.Future | None = None
        self.t0 = 0.0
        self.warmup_failures: list[str] = []
        self.connect_failed_streak = 0
        self.abort_reason: str | None = None
        self.arrival_handle: asyncio.TimerHandle | None = None
        self.arrivals: deque[WorkItem] = deque()  # open loop: requests whose time has not come yet
        self.closed = True  # closed loop: requests go as slots free
        self.stopped = False
        self.stop_reason = ""
        self.parent_pid: int | None = None  # stop when the parent process is gone

    # -- phases --------------------------------------------------------------------------------------------
    async def prepare(self) -> dict:
        """Open the connection pool, send the ready-check request, run this worker's warm-ups, read the first
        window of requests."""
        await self.pool.preconnect(self.spec.preconnect)
        info: dict = {"ready_error": None, "warmup_failed": 0, "loop": self.stats.loop_kind}
        if self.spec.ready_check is not None:
            errors = await self._batch([self.spec.ready_check], 1)
            if errors:
                info["ready_error"] = errors[0]
        if self.spec.warmups and not info["ready_error"]:  # at the run's own limit (the check used 1)
            errors = await self._batch(self.spec.warmups, self.spec.max_in_flight)
            info["warmup_failed"] = len(errors)
            info["warmup_errors"] = errors[:3]
        # even after a failed check: a worker that left its pipe unread would hold the feeder, and with it the
        # other workers' first windows, so they would never be ready
        self._read_first()
        return info

    def _read_first(self) -> None:
        """Read the first `first_items` requests from the feed (waiting for them): the run starts with its
        requests at hand, and a short run's are all made before it starts."""
        while self.feed is not None and not self.feed.ended and len(self.first) < self.spec.first_items:
            self.first.extend(self.feed.read())

    async def _batch(self, payloads: list[bytes], limit: int | None) -> list[str]:
        """Send unrecorded requests (ready check, warm-ups); return their errors."""
        self.recording = False
        self.warmup_failures = []
        items = [WorkItem(-1, p, 0) for p in payloads]
        await self._drive(items, limit, closed=True)
        return list(self.warmup_failures)

    async def run(self, t0: float) -> None:
        self.t0 = self.records.t0 = t0
        self.recording = True
        delay = t0 - perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        cpu0, wall0 = time.process_time(), perf_counter()
        sampler = self.loop.create_task(self._sample_lag())
        deadline = None
        if self.spec.max_seconds is not None:
            reason = MAX_SECONDS_REASON.format(self.spec.max_seconds)
            when = t0 + self.spec.max_seconds - perf_counter()
            deadline = self.loop.call_later(when, self._stop, reason, False)
        first, self.first = self.first, []
        try:
            await self._drive(first, self.spec.max_in_flight, not self.spec.open_loop, self.feed)
        finally:
            sampler.cancel()
            if deadline is not None:
                deadline.cancel()
            self.stats.cpu_s = time.process_time() - cpu0
            self.stats.wall_s = perf_counter() - wall0
            self.stats.publish(self.in_flight)
            self.records.flush()

    def cancel(self, reason: str) -> None:
        """The run was stopped before it started: every request is recorded as never sent (the rest of the
        feed read to its end)."""
        self.recording = True
        self.t0 = self.records.t0 = perf_counter()
        items, self.first = self.first, []
        while True:
            for it in items:
                self._not_sent(it, self.t0 + (it.offset or 0.0), reason)
            if self.feed is None or self.feed.ended:
                break
            items = self.feed.read()
        self.records.flush()

    async def _drive(
        self, items: list[WorkItem], limit: int | None, closed: bool, feed: FeedReader | None = None
    ) -> None:
        """Send `items`, and what `feed` brings after them, until every one has ended."""
        self.limit = limit
        self.closed = closed
        self.remaining = 0
        self.done = self.loop.create_future()
        self.feed_open = feed is not None and not feed.ended
        self._take(items, perf_counter())
        self._read_more()
        ticker = self.loop.create_task(self._tick())
        try:
            await self.done
        finally:
            ticker.cancel()
            self._unwatch_feed()

    # -- the feed -----------------------------------------------------------------------------------------
    def _take(self, items: list[WorkItem], now: float) -> None:
        """Requests come in: queued (closed loop), timed (open loop), or recorded as not sent (stopped)."""
        for it in items:
            self.remaining += 1 + len(it.turns)
        if self.stopped:
            for it in items:
                self._not_sent(it, now if self.closed else self._due(it), self.stop_reason)
        elif self.closed:
            self.pending.extend((it, None) for it in items)
            self.pump(now)
        elif items:
            self.arrivals.extend(items)
            if self.arrival_handle is None:
                self._arrive()
        self._check_done()

    def _on_feed(self) -> None:
        """The feed's pipe is readable: take one batch; stop watching at the end or with a full window."""
        assert self.feed is not None  # watched only with a feed
        items = self.feed.read(block=False)
        if self.feed.ended:
            self.feed_open = False
            self._unwatch_feed()
        self._take(items, perf_counter())
        if self.feed_open and not self.stopped and self.buffered() >= self.spec.window:
            self._unwatch_feed()

    def buffered(self) -> int:
        """Requests held and not sent yet."""
        return len(self.pending) + len(self.arrivals)

    def _read_more(self) -> None:
        """Watch the feed again once the requests held fall below half the window."""
        if not self.reading and self.feed_open and self.buffered() < self.spec.window // 2:
            self._watch_feed()

    def _watch_feed(self) -> None:
        if self.feed_open and not self.reading and self.feed is not None:
            self.loop.add_reader(self.feed.fileno(), self._on_feed)
            self.reading = True

    def _unwatch_feed(self) -> None:
        if self.reading and self.feed is not None:
            self.loop.remove_reader(self.feed.fileno())
            self.reading = False

    def _check_done(self) -> None:
        """Every request taken has ended and none is to come: the drive is over."""
        if self.remaining <= 0 and not self.feed_open and self.done is not None and not self.done.done():
            self.done.set_result(None)

    # -- dispatch -----------------------------------------------------------------------------------------
    def _arrive(self) -> None:
        """Chained arrival timer: enqueue every request whose time has come, re-arm for the next one."""
        self.arrival_handle = None
        now = perf_counter()
        arrivals = self.arrivals
        while arrivals and self._due(arrivals[0]) <= now + 0.0002:
            it = arrivals.popleft()
            self.pending.append((it, self._due(it)))
        if self.abort_reason is None and not self.stopping():
            self.pump(now)
        if arrivals:
            when = self._due(arrivals[0]) - perf_counter()
            self.arrival_handle = self.loop.call_later(max(0.0, when), self._arrive)
        self._read_more()

    def _due(self, it: WorkItem) -> float:
        """When an open-loop item is due (every one carries its offset)."""
        return self.t0 + (it.offset or 0.0)

    def stopping(self) -> bool:
        return self.stopped or self.done is None or self.done.done()

    def _start(self, st: RequestState) -> None:
        """Send one request: on an idle connection when there is one, else on a new one."""
        self.in_flight += 1
        conn = self.pool.take_idle()
        st.sent = perf_counter()
        if conn is not None:
            st.reused = True
            self.pool.activate(conn)
            conn.start(st)
        else:
            self.loop.create_task(self._connect_and_start(st))

    def pump(self, now: float) -> None:
        limit = self.limit
        while self.pending and (limit is None or self.in_flight < limit):
            item, sched = self.pending.popleft()
            if self.abort_reason is not None:
                self._not_sent(item, sched if sched is not None else now, self.abort_reason)
                continue
            self._start(RequestState(item, item.payload, now if sched is None else sched, now))
        self._read_more()
        # an aborted run drains pending into not-sent records: when that was the last, the run is over
        self._check_done()

    async def _connect_and_start(self, st: RequestState) -> None:
        st.new_conn = True
        try:
            conn = await self.pool.connect()
        except OSError as e:
            now = perf_counter()
            self.connect_failed_streak += 1
            # 5 connects in a row failing means nothing listens any more: stop sending instead of failing
            # every remaining request at its scheduled time (a run of hours against a dead server otherwise)
            if self.connect_failed_streak >= 5 and self.recording:
                self.abort_reason = f"run aborted: server unreachable ({type(e).__name__}: {e})"
            st.finished, st.end, st.error = True, now, f"connect failed: {type(e).__name__}: {e}"
            self.on_done(None, st, False)
            return
        self.connect_failed_streak = 0
        self.pool.activate(conn)
        conn.start(st)

    def retry(self, st: RequestState) -> None:
        st.retried, st.reused = True, False
        self.loop.create_task(self._connect_and_start(st))

    def conn_lost(self, conn: StreamConn) -> None:
        self.pool.lost(conn)

    def on_done(self, conn: StreamConn | None, st: RequestState, reusable: bool) -> None:
        self.in_flight -= 1
        if conn is not None:
            self.pool.release(conn, reusable)
        item: WorkItem = st.item
        if self.recording:
            rec, chunks = self.records.request(st)
            self.stats.request_done(rec["ok"], rec["out"], chunks)
        else:
            self.stats.warmup_done()
            if st.error:
                self.warmup_failures.append(st.error)
        self.remaining -= 1
        if item.turns:
            if st.error is None and not self.stopping() and self.abort_reason is None:
                self.pending.appendleft((self._next_turn(item, st), None))
            else:
                reason = "an earlier turn of this conversation failed" if st.error else "run stopped"
                for k in range(len(item.turns)):
                    self._not_sent(
                        WorkItem(item.key + k + 1, b"", item.turns[k][1]), st.end, reason, count=True
                    )
        if self.remaining <= 0 and not self.feed_open:
            self._check_done()
            return
        if not self.stopping():
            self.pump(st.end)

    def _next_turn(self, item: WorkItem, st: RequestState) -> WorkItem:
        """The next request of a conversation: the history plus the server's actual answer plus a new turn."""
        text, n, max_tokens = item.turns[0]
        messages = list(item.messages or []) + [
            {"role": "assistant", "content": st.generated_text()},
            {"role": "user", "content": text},
        ]
        payload = self.spec.template.encode(messages, max_tokens)
        return WorkItem(item.key + 1, payload, item.prompt_len + n, None, messages, item.turns[1:])

    # -- requests never sent ---------------------------------------------------------------------------------
    def _not_sent(self, item: WorkItem, sched: float, reason: str, count: bool = False) -> None:
        """A request the run never sent (aborted or stopped): recorded, not counted as failed."""
        if count:
            self.remaining -= 1
        else:
            self.remaining -= 1 + len(item.turns)
        if self.recording:
            self.records.not_sent(item.key, item.prompt_len, sched, reason)

    # -- periodic work ---------------------------------------------------------------------------------------
    async def _tick(self) -> None:
        last_cpu, last_wall = time.process_time(), perf_counter()
        while True:
            await asyncio.sleep(0.1)
            now = perf_counter()
            self.pool.expire(now, self.spec.timeout_s)
            if self.stop_event is not None and self.stop_event.is_set():
                self._stop(INTERRUPTED)
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                self._stop("the bench process is gone")
            if self.abort_reason is not None and self.pending:
                self.pump(now)  # drains pending into not-sent records
            cpu, wall = time.process_time(), perf_counter()
            self.stats.publish(self.in_flight, 100.0 * (cpu - last_cpu) / max(wall - last_wall, 1e-9))
            last_cpu, last_wall = cpu, wall
            self.records.flush()

    def _stop(self, reason: str, cancel_in_flight: bool = True) -> None:
        """Send nothing more; end the requests in flight too, unless they may finish (--max-seconds)."""
        if self.stopped:
            if cancel_in_flight:  # Ctrl-C after --max-seconds: stop waiting for the requests in flight
                self.pool.finish_all(perf_counter(), reason)
            return
        self.stopped = True
        self.stop_reason = reason
        if self.arrival_handle is not None:
            self.arrival_handle.cancel()
            self.arrival_handle = None
        now = perf_counter()
        while self.arrivals:
            it = self.arrivals.popleft()
            self._not_sent(it, self._due(it), reason)
        while self.pending:
            it, sched = self.pending.popleft()
            self._not_sent(it, sched if sched is not None else now, reason)
        if cancel_in_flight:
            self.pool.finish_all(now, reason)
        self._watch_feed()  # the rest of the feed, each recorded as not sent as it comes
        self._check_done()

    async def _sample_lag(self) -> None:
        while True:
            expected = perf_counter() + 0.01
            await asyncio.sleep(0.01)
            self.stats.loop_lags_s.append(perf_counter() - expected)
