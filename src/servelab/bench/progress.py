"""What the parent prints while the workers warm up and run: one status line.

On a terminal the line is rewritten in place about ten times a second, cut to the terminal's width so it
never wraps (a wrapped line scrolls: a carriage return only goes back to the start of its last row).
Anywhere else (a pipe, a CI log) the line is written as a plain line when the phase starts, then once every
`--progress-interval` seconds (10 by default; 0: none), and once more when the phase ends."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from time import monotonic

from servelab.bench.accounting import PROGRESS_SLOTS
from servelab.progress import DEFAULT_INTERVAL_S


class LiveLine:
    """One status line on `stream` (stderr by default). `live`: rewrite in place; otherwise a plain line the
    first time (unless not `at_start`), then at most one per `interval_s` (0: none until finish()), and the
    final one by finish()."""

    def __init__(
        self,
        live: bool,
        stream=None,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock=monotonic,
        at_start: bool = True,
    ) -> None:
        self.stream = stream or sys.stderr
        self.live = live
        self.last = ""
        self.interval_s = interval_s
        self.clock = clock
        # when the last plain line was written; None: the first line shown is written (`at_start`)
        self.written: float | None = None if at_start else clock()

    def width(self) -> int:
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError):  # not a terminal, or a stream without a descriptor
            return shutil.get_terminal_size().columns

    def show(self, text: str) -> None:
        self.last = text
        if self.live:
            self.stream.write("\r" + text[: self.width() - 1] + "\x1b[K")
            self.stream.flush()
        elif self.interval_s > 0:
            now = self.clock()
            if self.written is None or now - self.written >= self.interval_s:
                self.written = now
                self.stream.write(text + "\n")
                self.stream.flush()

    def finish(self, text: str | None = None) -> None:
        """End the line: the given text, or the last one shown, stays as a plain line."""
        text = self.last if text is None else text
        if not text:
            return
        if self.live:
            self.stream.write("\r" + text[: self.width() - 1] + "\x1b[K\n")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


@dataclass
class Totals:
    """The workers' shared progress slots, added up."""

    done: float
    failed: float
    tokens: float
    in_flight: float
    ttft_p50_ms: float  # mean of the workers' recent medians; 0 when none yet
    cpu_pct: float  # the busiest worker
    warmups_done: float

    @classmethod
    def read(cls, progress: Sequence) -> Totals:
        """The sum of the workers' slots (`progress`: each worker's PROGRESS_SLOTS shared doubles)."""
        rows = [slots[:PROGRESS_SLOTS] for slots in progress]
        done, failed, tokens, in_flight = (sum(r[i] for r in rows) for i in range(4))
        ttfts = [r[4] for r in rows if r[4] > 0]
        return cls(
            done,
            failed,
            tokens,
            in_flight,
            sum(ttfts) / len(ttfts) if ttfts else 0.0,
            max((r[5] for r in rows), default=0.0),
            sum(r[7] for r in rows),
        )


class RunProgress:
    """The run phase: requests done, failures, in flight, and rates over the last second."""

    def __init__(self, line: LiveLine, total: int | None) -> None:
        self.line = line
        self.total = "" if total is None else f"/{total}"  # None: a run without a fixed number of requests
        self.hist: list[tuple[float, float, float]] = []

    def update(self, elapsed: float, t: Totals) -> None:
        self.hist.append((elapsed, t.done, t.tokens))
        self.hist = [h for h in self.hist if elapsed - h[0] <= 1.0]
        t0, d0, k0 = self.hist[0]
        span = max(elapsed - t0, 1e-9)
        rps, tps = (t.done - d0) / span, (t.tokens - k0) / span
        ttft = f"{t.ttft_p50_ms:.1f} ms" if t.ttft_p50_ms > 0 else "-"
        self.line.show(
            f"[{elapsed:6.1f}s] {int(t.done)}{self.total} done  {int(t.failed)} failed  "
            f"{int(t.in_flight)} in flight  {rps:.1f} req/s  {tps:.0f} tok/s  TTFT p50 {ttft}  "
            f"client CPU {t.cpu_pct:.0f}%"
        )

    def finish(self, elapsed: float, t: Totals | None) -> None:
        if t is None:
            self.line.finish()
            return
        self.line.finish(
            f"[{elapsed:6.1f}s] {int(t.done)}{self.total} done  {int(t.failed)} failed  "
            f"{t.done / max(elapsed, 1e-9):.1f} req/s  {t.tokens / max(elapsed, 1e-9):.0f} tok/s"
        )


def warmup_start_line(num_warmups: int, max_concurrency: int | None) -> str:
    limit = max_concurrency if max_concurrency is not None else "unbounded"
    return f"warm-up: {num_warmups} requests at concurrency {limit} (not recorded)"


def warmup_line(elapsed: float, t: Totals, num_warmups: int, ready_check: bool) -> str:
    done = max(0, int(t.warmups_done) - (1 if ready_check else 0))
    return f"warm-up [{elapsed:6.1f}s] {done}/{num_warmups} done  {int(t.in_flight)} in flight"


def warmup_done_line(elapsed: float, num_warmups: int, failed: int) -> str:
    return f"warm-up: {num_warmups} done, {failed} failed in {elapsed:.1f} s"
