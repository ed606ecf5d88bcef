"""The load worker processes, kept from one bench to the next: `servelab run` starts them once for all its
benches (every repetition, every config), `servelab bench` for its one.

A bench takes the first n processes (take(n) starts those missing, so the pool grows to the largest bench).
Each process runs one bench at a time (worker.worker_main): its own connections, warm-ups and records file
each time, as a process of its own would. Starting a process ('spawn', so no parent state leaks into it)
costs a Python start and the package's imports: a few tenths of a second on 2 cores, more than a short
bench's requests.

A bench that did not end cleanly (a worker failed or did not report, the ready check failed, an interruption)
leaves its processes in an unknown state: the caller shuts the pool down, and the next take() starts new
ones. shutdown() asks each process to exit, then terminates and kills; the processes die with the parent
whatever kills it (worker.py).
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from servelab.bench.accounting import PROGRESS_SLOTS
from servelab.bench.worker import worker_main

EXIT_WAIT_S = 5.0  # how long a process is given to exit before it is terminated (then killed)


@dataclass
class WorkerProcess:
    """One worker process and the parent's ends of its pipes."""

    proc: BaseProcess
    pipe: Connection  # the bench protocol (worker.worker_main)
    feed: Connection  # the write end of its feed (feed.py)
    progress: object  # its shared progress slots (PROGRESS_SLOTS doubles)
    child_pipe: Connection  # the process's end of `pipe`, held so it is closed with the pool


class WorkerPool:
    """Worker processes for one bench or many; a `with` block shuts them down however it ends."""

    def __init__(self) -> None:
        self.ctx = mp.get_context("spawn")
        self.stop = self.ctx.Event()  # set by the parent to stop the bench under way (Ctrl-C, a signal)
        self.workers: list[WorkerProcess] = []
        self.started = 0  # processes started, over the pool's life

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def take(self, n: int) -> list[WorkerProcess]:
        """The first n processes, ready for a bench: started where missing, their progress slots zeroed and
        the stop event cleared."""
        if not all(w.proc.is_alive() for w in self.workers):
            self.shutdown()  # one died between benches (killed from outside): all start afresh
        while len(self.workers) < n:
            self.workers.append(self._start())
        self.stop.clear()
        for w in self.workers[:n]:
            w.progress[:] = [0.0] * PROGRESS_SLOTS  # type: ignore[index]
        return self.workers[:n]

    def _start(self) -> WorkerProcess:
        progress = self.ctx.Array("d", PROGRESS_SLOTS, lock=False)
        parent_end, child_end = self.ctx.Pipe()
        feed_out, feed_in = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(
            target=worker_main, args=(progress, self.stop, child_end, feed_out), daemon=True
        )
        proc.start()
        feed_out.close()  # the process's copy is the only one: its death breaks the pipe for the feeder
        self.started += 1
        return WorkerProcess(proc, parent_end, feed_in, progress, child_end)

    def shutdown(self) -> None:
        """End every process: asked to exit, terminated after EXIT_WAIT_S, then killed."""
        workers, self.workers = self.workers, []
        for w in workers:
            try:
                w.pipe.send(("exit",))
            except OSError:
                pass  # gone already
        for w in workers:
            w.proc.join(EXIT_WAIT_S)
            if w.proc.is_alive():
                w.proc.terminate()
                w.proc.join(EXIT_WAIT_S)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join()
            w.pipe.close()
            w.child_pipe.close()
            # the feed's write end is not closed here: a feeder thread still writing may hold it (a descriptor
            # closed under it could be reused by another file); it is closed when the last holder drops it
