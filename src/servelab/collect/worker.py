"""What runs inside a worker process (local executor) or a Ray task: init once, then measure keys one by one.
Never raises for a failed op: the failure is returned with its class, and the campaign goes on."""

import os
import traceback
from typing import Any

from servelab.collect.campaign_dir import key_from_row
from servelab.collect.suite import OpSuite, resolve
from servelab.perfdb.keys import Comm


def measure(suite: OpSuite, key, rank: int | None = None, group=None) -> tuple[str, dict | tuple[str, str]]:
    """("row", result) or ("error", (error_class, message))."""
    try:
        fn = resolve(suite.bench[key.op])
        result = fn(key) if rank is None else fn(key, rank, group)
        return "row", _plain(result)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        error_class = resolve(suite.classify)(e)
        message = f"{type(e).__name__}: {e}"[:1500]
        if error_class == "error":
            message += (
                " | " + " < ".join(line.strip() for line in traceback.format_exc().splitlines()[-4:])[:500]
            )
        try:
            resolve(suite.after_error)()
        except BaseException as cleanup:  # noqa: BLE001 - a broken context surfaces on the next op
            message += f" | cleanup failed: {type(cleanup).__name__}"
        return "error", (error_class, message)


def _plain(result: dict) -> dict:
    out = {}
    for k, v in result.items():
        if hasattr(v, "item"):
            v = v.item()
        if isinstance(v, float):
            v = round(v, 4) if abs(v) >= 1e-3 else v
        out[k] = v
    return out


def _init(path: str, args: tuple, index: int, outbox) -> tuple[bool, Any]:
    """(True, what a suite's init returned), or on failure (False, None) after telling the parent once: a
    worker that cannot start measures nothing, and a traceback per key would bury the reason."""
    try:
        return True, resolve(path)(*args)
    except Exception as e:  # noqa: BLE001 - any failure here means this worker cannot measure anything
        outbox.put(("init_error", index, None, f"{type(e).__name__}: {e}"[:500]))
        return False, None


class PipeOutbox:
    """A local worker's own channel to the parent, with the put/close/join_thread of a queue: sends are
    synchronous (no feeder thread) and take no lock shared with other workers."""

    def __init__(self, conn):
        self.conn = conn

    def put(self, message: tuple) -> None:
        self.conn.send(message)

    def close(self) -> None:
        self.conn.close()

    def join_thread(self) -> None:
        """Nothing is buffered: every put has reached the pipe when it returns."""


def local_worker(index: int, suite: OpSuite, inbox, outbox) -> None:
    """One process per device: announces each key before running it, so the parent knows what a crash hit."""
    started, _ = _init(suite.worker_init, (index,), index, outbox)
    if not started:
        return
    if index == 0:
        try:
            outbox.put(("facts", index, None, resolve(suite.facts)()))
        except Exception as e:  # noqa: BLE001 - provenance is best effort, never blocks measuring
            outbox.put(("facts", index, None, {"facts_error": str(e)}))
    while True:
        item = inbox.get()
        if item is None:
            outbox.put(("exit", index, None, None))
            return
        key = key_from_row(item)
        outbox.put(("start", index, item, None))
        kind, payload = measure(suite, key)
        outbox.put((kind, index, item, payload))
        if kind == "error" and payload[0] == "cuda_fatal":
            # a CUDA context that saw an illegal address fails every later call: exit, the parent starts a
            # new one
            outbox.close()
            outbox.join_thread()  # the error reaches the parent before the process goes
            os._exit(70)


def comm_key(item: dict) -> Comm:
    """A collective's key from its row (every item a comm worker is given is one)."""
    key = key_from_row(item)
    if not isinstance(key, Comm):
        raise TypeError(f"{item.get('op')}: not a collective")
    return key


def comm_worker(rank: int, world: int, port: int, suite: OpSuite, items: list[dict], outbox) -> None:
    """One process per GPU; all ranks walk the same list of collectives, those outside a case's group skip
    it."""
    keys = [comm_key(i) for i in items]
    started, groups = _init(
        suite.comm_init, (rank, world, port, sorted({k.gpus for k in keys})), rank, outbox
    )
    if not started:
        return
    barrier = resolve(suite.barrier)
    for item, key in zip(items, keys, strict=False):
        if rank == 0:
            outbox.put(("start", rank, item, None))
        if rank < key.gpus:
            kind, payload = measure(suite, key, rank, groups[key.gpus])
            if rank == 0:
                outbox.put((kind, rank, item, payload))
        barrier()
    if rank == 0:
        outbox.put(("exit", rank, None, None))
    resolve(suite.comm_close)()
