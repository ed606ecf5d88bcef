"""A worker's accounting: what it completed, how busy it was, and what it tells the parent.

The counters feed the parent's live line through the worker's shared progress slots (PROGRESS_SLOTS doubles)
and end in the worker's summary, from which the parent builds the result's client section."""

from __future__ import annotations

import os

from servelab.metrics import percentile

# completed, failed, output tokens, in flight, TTFT p50 ms (recent), cpu %, lag max ms, warm-ups done
PROGRESS_SLOTS = 8


class Accounting:
    """Counters of one worker process. `progress` is its shared slots (None: nobody watches)."""

    def __init__(self, index: int, loop_kind: str, progress=None) -> None:
        self.index = index
        self.loop_kind = loop_kind
        self.progress = progress
        self.completed = 0
        self.failed = 0
        self.output_tokens = 0
        self.warmups_done = 0  # the ready check included
        self.content_events = 0
        self.connections_opened = 0
        self.recent_ttft_us: list[float] = []  # first-event times since the last publish
        self.ttft_p50_ms = 0.0
        self.loop_lags_s: list[float] = []  # event-loop lag samples (every 10 ms)
        self.cpu_s = 0.0
        self.wall_s = 0.0

    def request_done(self, ok: bool, output_tokens: int | None, chunks_us: list[int]) -> None:
        """Count one recorded request (chunks: its content events, us after it was sent)."""
        if not ok:
            self.failed += 1
            return
        self.completed += 1
        self.output_tokens += output_tokens or 0
        self.content_events += len(chunks_us)
        if chunks_us:
            self.recent_ttft_us.append(chunks_us[0])

    def warmup_done(self) -> None:
        self.warmups_done += 1

    def publish(self, in_flight: int, cpu_pct: float | None = None) -> None:
        """Write this worker's shared progress slots."""
        if self.progress is None:
            return
        if self.recent_ttft_us:
            self.ttft_p50_ms = percentile(sorted(self.recent_ttft_us), 50) / 1000.0
            self.recent_ttft_us = []
        p = self.progress
        p[0], p[1], p[2], p[3] = self.completed, self.failed, self.output_tokens, in_flight
        p[4] = self.ttft_p50_ms
        if cpu_pct is not None:
            p[5] = cpu_pct
        p[6] = max(self.loop_lags_s[-10:], default=0.0) * 1000.0
        p[7] = self.warmups_done

    def summary(self, abort_reason: str | None) -> dict:
        """What the worker sends the parent when it is done."""
        return {
            "worker": self.index,
            "pid": os.getpid(),
            "loop": self.loop_kind,
            "cpu_s": self.cpu_s,
            "wall_s": self.wall_s,
            "connections_opened": self.connections_opened,
            "content_events": self.content_events,
            "loop_lag_s": self.loop_lags_s,
            "abort_reason": abort_reason,
        }
