"""The requests of a run, handed to the worker processes as they go: never all made, never all held.

One thread of the parent walks the dataset in its order (so a seed gives the prompts and the schedule it
always gave), renders each request and sends it, in batches, to worker n % W (the round-robin share) over that
worker's own pipe. A worker reads its pipe only while it holds fewer unsent requests than its window
(worker.py), so a full pipe holds the thread back: what is made ahead of sending stays within the windows and
what the pipes buffer, whatever the number of requests. Workers take their first requests (first_items: a
window, or a few MB of them) before they say they are ready: the run starts with its requests at hand, and a
short run's are all made before it starts.

Once the run stops (Ctrl-C, a signal, --max-seconds, a stop before the start) the rest are still walked and
sent, without their request bytes, for each to be recorded as not sent: every request of a run has a record.

On the pipe: frames of a 4-byte length and a pickled batch; a bench's feed ends with an empty frame (the
next bench's follows: a worker process serves every bench of a `servelab run`, processes.py), or when the
parent closes its end. The worker reads the raw bytes itself, because the event loop makes a watched pipe
non-blocking and a message can arrive in parts.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

BATCH = 32  # requests a message carries
# about how many bytes of requests a worker reads before the start, when more than its window: a short run's
# requests are all made before it starts, so making them costs the run nothing (8 MB: some 20,000 requests of
# a few hundred tokens); a long run holds this much more, whatever its length
PREFILL_BYTES = 8 << 20
READ_BYTES = 1 << 14  # a read takes at most this (a few dozen requests over the window)
FRAME_LENGTH = struct.Struct("!I")  # a frame: this length, then a pickled batch of packed WorkItems
END = FRAME_LENGTH.pack(0)  # the frame that ends a bench's feed


@dataclass
class WorkItem:
    """What a worker sends: the pre-serialized request plus what it needs to record and to continue."""

    key: int
    payload: bytes
    prompt_len: int
    offset: float | None = None  # arrival offset (open loop); None = closed loop
    messages: list[dict] | None = None  # multiturn: history so far (user/assistant)
    turns: list[tuple[str, int, int]] = field(default_factory=list)  # later turns: (text, len, max_tokens)

    def packed(self) -> tuple:
        return (self.key, self.payload, self.prompt_len, self.offset, self.messages, self.turns)


def window_for(limit: int | None) -> int:
    """How many unsent requests a worker holds at most: twice its concurrency limit, so every slot that
    frees finds the next request at hand, and a few batches more (1,024 without a limit)."""
    return 2 * limit + 4 * BATCH if limit is not None else 1024


def first_items(share: int, window: int, request_bytes: int) -> int:
    """How many requests a worker reads before the start: its window, or about PREFILL_BYTES of requests of
    `request_bytes` (the first request's size), whichever is more, and no more than its share. Counted, not
    weighed: when no worker's count exceeds an earlier worker's (shares and windows never grow with the
    index), every one gets its count while the feeder goes round them, so none waits on one that has stopped
    reading."""
    return min(share, max(window, PREFILL_BYTES // max(1, request_bytes)))


class Feeder:
    """The parent's side: a thread sending `items` round-robin to `conns` (one a worker), in batches."""

    def __init__(self, items: Iterator[WorkItem], conns: list[Connection]) -> None:
        self.items = items
        self.conns = conns
        self.abandoned = False
        self.error: str | None = None  # why the walk failed (a dataset error mid-run), said by the runner
        self.thread = threading.Thread(target=self._run, name="servelab-bench-feed", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def alive(self) -> bool:
        return self.thread.is_alive()

    def abandon(self) -> None:
        """Send nothing more (the run failed before its start, or the parent gives up waiting): the thread
        ends at its next request and ends the feeds."""
        self.abandoned = True

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def _run(self) -> None:
        n_workers = len(self.conns)
        batches: list[list[tuple]] = [[] for _ in self.conns]
        live = [True] * n_workers
        try:
            for n, item in enumerate(self.items):
                if self.abandoned:
                    return
                k = n % n_workers
                if not live[k]:
                    continue
                batches[k].append(item.packed())
                if len(batches[k]) >= BATCH:
                    live[k] = self._send(k, batches[k])
                    batches[k] = []
            for k in range(n_workers):
                if live[k] and batches[k]:
                    live[k] = self._send(k, batches[k])
        except Exception as e:  # a dataset that fails mid-walk: the workers see the end, the runner says why
            self.error = f"{type(e).__name__}: {e}"
        finally:
            for k in range(n_workers):
                if live[k]:
                    self._write(k, END)

    def _send(self, k: int, batch: list[tuple]) -> bool:
        """Send one batch to worker k (waits while its pipe is full); False when that worker is gone (its
        share is dropped, as its process's would have been)."""
        body = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
        return self._write(k, FRAME_LENGTH.pack(len(body)) + body)

    def _write(self, k: int, data: bytes) -> bool:
        frame = memoryview(data)
        try:
            fd = self.conns[k].fileno()
            while frame:
                frame = frame[os.write(fd, frame) :]
        except OSError:  # BrokenPipeError: the worker died (or the pool was shut down)
            return False
        return True


class FeedReader:
    """A worker's side: its pipe from the Feeder, read as raw bytes (the pipe may be non-blocking)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn  # kept: it owns the descriptor
        self.fd = conn.fileno()
        self.buffer = bytearray()
        self.ended = False
        self.closed = False  # the parent closed its end: no bench's feed comes any more

    def next_feed(self) -> None:
        """Read the next bench's feed (what follows the last one's end)."""
        self.ended = self.closed

    def fileno(self) -> int:
        return self.fd

    def read(self, block: bool = True) -> list[WorkItem]:
        """The requests of the batches that have come whole, waiting for one when `block`; [] with `ended`
        set once the feed ended (its end frame, or the parent closed the pipe)."""
        while True:
            items = self._whole()
            if items or self.ended or not self._fill(block):
                return items

    def _fill(self, block: bool) -> bool:
        """Read what the pipe holds (waiting for something when `block`); False when nothing came."""
        if block:
            select.select([self.fd], [], [])
        try:
            data = os.read(self.fd, READ_BYTES)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self.ended = self.closed = True
            return False
        self.buffer += data
        return True

    def _whole(self) -> list[WorkItem]:
        """The requests of every whole batch in the buffer up to the feed's end, taken out of it."""
        items: list[WorkItem] = []
        buf = self.buffer
        at = 0
        while not self.ended and len(buf) - at >= FRAME_LENGTH.size:
            (n,) = FRAME_LENGTH.unpack_from(buf, at)
            if len(buf) - at - FRAME_LENGTH.size < n:
                break
            start = at + FRAME_LENGTH.size
            if n == 0:
                self.ended = True
                at = start
                break
            items.extend(WorkItem(*packed) for packed in pickle.loads(buf[start : start + n]))
            at = start + n
        if at:
            del buf[:at]
        return items
