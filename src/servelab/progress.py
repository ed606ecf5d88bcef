"""Progress as plain lines, for where no live display can be drawn (a pipe, a file, a CI log): a line when a
stage begins, and within a long stage a line at a steady interval with how far it is and an estimate of the
time left. A CI log that shows nothing for minutes looks like a hang; one line every ten seconds does not.

    steps = Steps("predicting", total=len(jobs))
    for job in jobs:
        ...
        steps.advance()
    steps.finish()
"""

from __future__ import annotations

import sys
import time
from typing import IO

DEFAULT_INTERVAL_S = 10.0


def is_terminal(stream: IO[str] | None = None) -> bool:
    """Whether `stream` (stderr by default) is a terminal, where a live display can redraw itself."""
    stream = stream if stream is not None else sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed stream, or an object without isatty
        return False


def duration(seconds: float) -> str:
    """'45 s', '12 min 5 s', '2 h 3 min': whole units a reader takes in at a glance."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def eta(elapsed_s: float, done: float, total: float) -> str:
    """The time left at the rate so far ('ETA 3 min 10 s'); 'ETA unknown' before anything is done."""
    if done <= 0 or total <= 0:
        return "ETA unknown"
    return f"ETA {duration(elapsed_s * (total - done) / done)}"


class Steps:
    """Progress through `total` items of one stage as plain lines on `stream` (stderr): the stage's first line
    at once, then at most one line per `interval_s` as items complete, and a last line at finish(). Each line
    says what is done, the time spent and the estimate of the time left. `interval_s` 0: the first and the
    last line only."""

    def __init__(
        self,
        what: str,
        total: int,
        interval_s: float = DEFAULT_INTERVAL_S,
        stream: IO[str] | None = None,
        clock=time.monotonic,
    ) -> None:
        self.what, self.total, self.interval_s = what, total, interval_s
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = self.said = clock()
        self.done = 0
        self.notes = ""
        self._write(f"{what}: {total} to do")

    def _write(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def line(self) -> str:
        elapsed = self.clock() - self.start
        notes = f", {self.notes}" if self.notes else ""
        left = f", {eta(elapsed, self.done, self.total)}" if self.done < self.total else ""
        return f"{self.what}: {self.done}/{self.total} done{notes}, {duration(elapsed)}{left}"

    def advance(self, n: int = 1, notes: str = "") -> None:
        """`n` more items done (`notes`: counts worth showing, e.g. '2 errors'); a line when the interval
        has passed since the last one."""
        self.done += n
        self.notes = notes or self.notes
        now = self.clock()
        if self.interval_s > 0 and now - self.said >= self.interval_s:
            self.said = now
            self._write(self.line())

    def finish(self) -> None:
        self._write(self.line())
