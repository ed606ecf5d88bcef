"""Executors run a campaign's keys and report each outcome to the campaign (which alone writes files).

- LocalExecutor (default): one worker process per GPU for single-GPU ops, handed keys one at a time (so a slow
  key never holds up a queue); a worker that dies or overruns its time limit is replaced and the key it held
  is recorded as an error; collectives run in one process per GPU over NCCL.
- RayExecutor: one Ray task per GPU per shard of keys (num_gpus=1), collectives on a placement group of one
  bundle per GPU (STRICT_PACK: inside one node's NVLink domain). Run it against a cluster's address, or a
  local cluster when none is given.
"""

import multiprocessing as mp
import queue
import socket
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any, NamedTuple

from servelab.collect.campaign_dir import key_from_row
from servelab.collect.suite import OpSuite, resolve
from servelab.collect.worker import PipeOutbox, comm_worker, local_worker, measure
from servelab.errors import ServelabError
from servelab.registry import Registry


class Callbacks(NamedTuple):
    started: Callable  # (key) -> None
    row: Callable  # (key, result) -> None
    error: Callable  # (key, error_class, message) -> None
    facts: Callable  # (dict) -> None


class WorkersFailed(ServelabError):
    """A worker could not start (torch, CUDA or NCCL broken on this machine): nothing can be measured, the run
    failed (exit 1)."""

    exit_code = 1


def _init_failed(index: int, message: str) -> WorkersFailed:
    return WorkersFailed(f"collect worker {index} could not start, nothing measured: {message}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalExecutor:
    def __init__(self, devices: int, case_timeout_s: float = 300.0):
        self.devices = max(1, devices)
        self.case_timeout_s = case_timeout_s
        self.ctx = mp.get_context("spawn")

    def _start(self, index: int, suite: OpSuite) -> tuple[Any, Any, Connection]:
        """A worker with its own inbox and its own pipe back: a worker that dies mid-send can garble only its
        own channel (a queue shared by all workers has one write lock, which a worker killed while holding it
        keeps for ever, and every other worker's results then stop arriving)."""
        inbox = self.ctx.Queue()
        reader, writer = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(
            target=local_worker, args=(index, suite, inbox, PipeOutbox(writer)), daemon=True
        )
        proc.start()
        writer.close()  # the worker holds the write end now: its death reads as end of file here
        return proc, inbox, reader

    def run_single(self, keys: list, suite: OpSuite, cb: Callbacks, deadline: float | None = None) -> None:
        if not keys:
            return
        n = min(self.devices, len(keys))
        workers = {i: self._start(i, suite) for i in range(n)}
        pending = [k._asdict() for k in keys]
        pending.reverse()
        busy: dict[int, tuple[dict, float]] = {}
        idle = set(workers)
        try:
            while pending or busy:
                out_of_time = deadline is not None and time.monotonic() > deadline
                while idle and pending and not out_of_time:
                    i = idle.pop()
                    item = pending.pop()
                    busy[i] = (item, time.monotonic())
                    workers[i][1].put(item)
                if out_of_time and not busy:
                    break
                readers = {reader: i for i, (_, _, reader) in workers.items()}
                ready = set(wait(list(readers), timeout=1.0))
                for reader in (r for r in readers if r in ready):
                    try:
                        message = reader.recv()
                    except (EOFError, OSError):  # the worker died: replace it below
                        workers[readers[reader]][0].join(timeout=5)
                        continue
                    self._handle(message, busy, idle, cb)
                self._reap(workers, busy, idle, suite, cb)
        finally:
            for proc, inbox, _ in workers.values():
                if proc.is_alive():
                    inbox.put(None)
            for proc, _, reader in workers.values():
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
                reader.close()

    @staticmethod
    def _handle(message: tuple, busy: dict, idle: set, cb: Callbacks) -> None:
        kind, index, item, payload = message
        if kind == "init_error":
            raise _init_failed(index, payload)
        if kind == "facts":
            cb.facts(payload)
        elif kind == "start":
            busy[index] = (item, time.monotonic())
            cb.started(key_from_row(item))
        elif kind in ("row", "error"):
            busy.pop(index, None)
            idle.add(index)
            key = key_from_row(item)
            if kind == "row":
                cb.row(key, payload)
            else:
                cb.error(key, payload[0], payload[1])

    def _reap(self, workers, busy, idle, suite, cb) -> None:
        """Replace a worker that died (a CUDA fatal error kills the context) or overran its time limit."""
        now = time.monotonic()
        for i, (proc, _, reader) in list(workers.items()):
            item, since = busy.get(i, (None, now))
            dead = not proc.is_alive()
            late = item is not None and now - since > self.case_timeout_s
            if not (dead or late):
                continue
            if late and not dead:
                proc.kill()
            proc.join(timeout=5)
            if item is not None:
                what = (
                    f"worker exited with code {proc.exitcode}"
                    if dead
                    else f"no result after {self.case_timeout_s:.0f} s"
                )
                cb.error(key_from_row(item), "worker_crash" if dead else "timeout", what)
            busy.pop(i, None)
            reader.close()
            workers[i] = self._start(i, suite)
            idle.add(i)

    def run_comm(
        self,
        keys: list,
        suite: OpSuite,
        world: int,
        cb: Callbacks,
        deadline: float | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        keys = [k for k in keys if k.gpus <= world]
        if not keys:
            return

        outbox = self.ctx.Queue()
        port = free_port()
        items = [k._asdict() for k in keys]
        procs = [
            self.ctx.Process(target=comm_worker, args=(r, world, port, suite, items, outbox), daemon=True)
            for r in range(world)
        ]
        for p in procs:
            p.start()
        start = time.monotonic()
        current = None
        done = set()

        def handle(message: tuple) -> bool:
            """One message of rank 0's; True once it said it is through its list."""
            nonlocal current
            kind, rank, item, payload = message
            if kind == "init_error":
                raise _init_failed(rank, payload)
            if kind == "start":
                current = item
                cb.started(key_from_row(item))
            elif kind in ("row", "error"):
                key = key_from_row(item)
                done.add(key)
                if kind == "row":
                    cb.row(key, payload)
                else:
                    cb.error(key, payload[0], payload[1])
            return kind == "exit"

        try:
            while True:
                limit = min(start + timeout_s, deadline + 60 if deadline else float("inf"))
                try:
                    if handle(outbox.get(timeout=1.0)):
                        return
                    continue
                except queue.Empty:
                    pass
                # A rank that ended with status 0 went through its list (another rank may still be sending);
                # a crash, or rank 0 (which reports) gone, ends the run, once what rank 0 sent before it
                # ended is read: a busy machine can leave that in the queue past the 1 s wait.
                crashed = any(p.exitcode not in (None, 0) for p in procs)
                if time.monotonic() <= limit and not crashed and procs[0].exitcode is None:
                    continue
                while True:
                    try:
                        if handle(outbox.get(timeout=0.5)):
                            return
                    except queue.Empty:
                        break
                if current is not None and key_from_row(current) not in done:
                    why = (
                        "collective workers stopped"
                        if time.monotonic() <= limit
                        else "collectives ran out of time"
                    )
                    cb.error(key_from_row(current), "worker_crash", why)
                return
        finally:
            for p in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
                    p.join()


# ---- Ray ---------------------------------------------------------------------------------------------------
def _ray_shard(suite: OpSuite, items: list[dict], want_facts: bool) -> list:
    """A Ray task: one GPU (Ray sets CUDA_VISIBLE_DEVICES, so it is device 0 here), a shard of keys."""
    resolve(suite.worker_init)(0)
    out: list[tuple[str, Any, Any]] = []
    if want_facts:
        out.append(("facts", None, resolve(suite.facts)()))
    for item in items:
        kind, payload = measure(suite, key_from_row(item))
        out.append((kind, item, payload))
    return out


class _CommActor:
    def address(self) -> str:
        import ray  # noqa: PLC0415 - ray is an optional extra (the core install has none)

        return ray.util.get_node_ip_address()

    def run(self, rank, world, host, port, suite, items):
        # STRICT_PACK puts every rank on one node, so the ranks meet on that node's loopback (host is
        # informative)
        keys = [key_from_row(i) for i in items]
        groups = resolve(suite.comm_init)(rank, world, port, sorted({k.gpus for k in keys}))
        out = []
        for item, key in zip(items, keys, strict=False):
            if rank < key.gpus:
                kind, payload = measure(suite, key, rank, groups[key.gpus])
                out.append((kind, item, payload))
        return out if rank == 0 else []


class RayExecutor:
    def __init__(
        self, address: str | None = None, shard_size: int = 8, gpu: bool = True, num_cpus: int | None = None
    ):
        self.address = address
        self.shard_size = shard_size
        self.gpu = gpu
        self.num_cpus = num_cpus

    def _init(self):
        import ray  # noqa: PLC0415 - ray is an optional extra (the core install has none)

        if not ray.is_initialized():
            kwargs = {"address": self.address} if self.address else {"num_cpus": self.num_cpus}
            ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False, **kwargs)
        return ray

    def _resources(self) -> dict:
        return {"num_gpus": 1, "num_cpus": 1} if self.gpu else {"num_gpus": 0, "num_cpus": 1}

    def run_single(self, keys: list, suite: OpSuite, cb: Callbacks, deadline: float | None = None) -> None:
        if not keys:
            return
        ray = self._init()
        task = ray.remote(**self._resources())(_ray_shard)
        items = [k._asdict() for k in keys]
        shards = [items[i : i + self.shard_size] for i in range(0, len(items), self.shard_size)]
        pending = {}
        for n, shard in enumerate(shards):
            pending[task.remote(suite, shard, n == 0)] = shard
        while pending:
            if deadline is not None and time.monotonic() > deadline:
                for ref in pending:
                    ray.cancel(ref)
                return
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in ready:
                pending.pop(ref)
                for kind, item, payload in ray.get(ref):
                    if kind == "facts":
                        cb.facts(payload)
                    elif kind == "row":
                        cb.row(key_from_row(item), payload)
                    else:
                        cb.error(key_from_row(item), payload[0], payload[1])

    def run_comm(
        self, keys: list, suite: OpSuite, world: int, cb: Callbacks, deadline: float | None = None
    ) -> None:
        keys = [k for k in keys if k.gpus <= world]
        if not keys:
            return
        ray = self._init()
        # ray is an optional extra (the core install has none)
        from ray.util.placement_group import placement_group, remove_placement_group  # noqa: PLC0415
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # noqa: PLC0415

        bundle = {"GPU": 1, "CPU": 1} if self.gpu else {"CPU": 1}
        pg = placement_group([bundle] * world, strategy="STRICT_PACK")
        ray.get(pg.ready())
        try:
            actor_cls = ray.remote(**self._resources())(_CommActor)
            actors = [
                actor_cls.options(
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=pg, placement_group_bundle_index=r
                    )
                ).remote()
                for r in range(world)
            ]
            host = ray.get(actors[0].address.remote())
            port = free_port()
            items = [k._asdict() for k in keys]
            results = ray.get(
                [a.run.remote(r, world, host, port, suite, items) for r, a in enumerate(actors)]
            )
            for kind, item, payload in results[0]:
                if kind == "row":
                    cb.row(key_from_row(item), payload)
                else:
                    cb.error(key_from_row(item), payload[0], payload[1])
            for a in actors:
                ray.kill(a)
        finally:
            remove_placement_group(pg)


Executor = LocalExecutor | RayExecutor


def _local(devices: int, address: str | None) -> LocalExecutor:
    return LocalExecutor(devices)


def _ray(devices: int, address: str | None) -> RayExecutor:
    try:
        import ray  # noqa: F401, PLC0415 - ray is an optional extra; only checked for here
    except ImportError:
        raise ServelabError("the ray executor needs ray: pip install '.[ray]'") from None
    return RayExecutor(address=address)


# name -> (GPUs on this node, Ray cluster address or None) -> executor
EXECUTORS: Registry[Callable[[int, str | None], Executor]] = Registry(
    "executor", {"local": _local, "ray": _ray}
)
