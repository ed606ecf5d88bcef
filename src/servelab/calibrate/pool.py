"""Pricing a list of rows with servelab's predictor, in worker processes when asked (`--jobs`): a calibration
spends nearly all its time here, one simulation per row and parameter set.

Workers are forked, so the pricer (often a closure) and the rows reach them by inheritance, never pickled;
only row indices go out and (ttft_ms, tpot_ms) pairs come back, in the rows' order, each computed exactly as
one process would compute it."""

import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from servelab.calibrate.rows import Case
from servelab.errors import ServelabError
from servelab.progress import DEFAULT_INTERVAL_S, duration, eta

Price = Callable[[Case, dict[str, float]], tuple[float, float]]
Echo = Callable[[str], None]
Row = tuple[Case, dict[str, float]]  # a case and the engine parameters to price it at
Priced = tuple[float, float] | ServelabError  # a row servelab refuses keeps its reason

# small chunks: rows differ in cost by 100x, and a worker left with a big chunk keeps the others waiting
CHUNKS_PER_WORKER = 16
PROGRESS_EVERY_S = DEFAULT_INTERVAL_S  # within a long phase, a progress line at most this often


@dataclass(frozen=True)
class Jobs:
    """How lists of rows are priced: in `workers` processes (1: in this one), with a progress line per phase
    to `echo` (rows done / total, seconds in the phase and since `started`)."""

    workers: int = 1
    echo: Echo | None = None
    started: float = field(default_factory=time.time)


SERIAL = Jobs()  # in this process, no progress lines


def workers_for(jobs: int, rows: int | None = None) -> int:
    """The --jobs option as a number of processes: 0 is one per core; never more than the cores (more
    processes only share them) nor than `rows`, the rows to price (a process without a row is a fork for
    nothing)."""
    if jobs < 0:
        raise ServelabError(
            f"{jobs}; expected 0 (one process per core) or a number of processes", field="jobs"
        )
    cores = os.cpu_count() or 1
    return max(1, min(jobs or cores, cores, cores if rows is None else rows))


def price_rows(rows: Sequence[Row], price: Price, jobs: Jobs = SERIAL, phase: str = "pricing") -> np.ndarray:
    """(ttft_ms, tpot_ms) of every row, shape (len(rows), 2); raises the first row's refusal, if any."""
    priced = try_price_rows(rows, price, jobs, phase)
    for p in priced:
        if isinstance(p, ServelabError):
            raise p
    return np.array(priced, dtype=float).reshape(-1, 2)


def try_price_rows(
    rows: Sequence[Row], price: Price, jobs: Jobs = SERIAL, phase: str = "pricing"
) -> list[Priced]:
    """Each row's (ttft_ms, tpot_ms), or the ServelabError servelab refuses it with, in the rows' order."""
    t0 = time.time()
    size = max(1, len(rows) // (jobs.workers * CHUNKS_PER_WORKER))
    spans = [(a, min(a + size, len(rows))) for a in range(0, len(rows), size)]
    out: list[Priced | None] = [None] * len(rows)
    done, said = 0, t0
    processes = max(1, min(jobs.workers, len(spans)))

    def placed(start: int, got: list[Priced]) -> None:
        nonlocal done, said
        out[start : start + len(got)] = got
        done += len(got)
        now = time.time()
        if jobs.echo and (done == len(rows) or now - said >= PROGRESS_EVERY_S):
            left = "" if done == len(rows) else f", {eta(now - t0, done, len(rows))}"
            jobs.echo(
                f"  {phase}: {done}/{len(rows)} rows, {duration(now - t0)}{left} "
                f"({duration(now - jobs.started)} in all, {processes} process{'es' * (processes > 1)})"
            )
            said = now

    if processes == 1:
        for a, b in spans:
            placed(a, _price_span(price, rows, a, b))
    else:
        # forked workers inherit the pricer and the rows (a closure cannot be pickled)
        context = multiprocessing.get_context("fork")
        with context.Pool(processes, _inherit, (price, rows)) as pool:
            for a, got in pool.imap_unordered(_price_inherited, spans):
                placed(a, got)
    return cast(list[Priced], out)  # every span was placed


def _price_span(price: Price, rows: Sequence[Row], a: int, b: int) -> list[Priced]:
    got: list[Priced] = []
    for case, params in rows[a:b]:
        try:
            got.append(price(case, params))
        except ServelabError as e:
            got.append(e)
    return got


_inherited: tuple[Price, Sequence[Row]] | None = None  # set in each worker as it starts


def _inherit(price: Price, rows: Sequence[Row]) -> None:
    global _inherited
    _inherited = (price, rows)
    # Ctrl-C reaches the whole process group: the parent stops the pool, workers print no tracebacks
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _price_inherited(span: tuple[int, int]) -> tuple[int, list[Priced]]:
    if _inherited is None:
        raise RuntimeError("a worker prices only after _inherit")
    return span[0], _price_span(*_inherited, *span)
