"""A run's writes to the results store, kept first in its run folder (`runs/<id>/store-journal.jsonl`).

Every stage row, metric set and the run's end are appended to the journal (flushed to disk) before they are
written to the store. When the store cannot be written (another writer holds its lock past the busy timeout,
the disk under it is full, it is read-only), the run goes on measuring and the journal keeps what the store
lacks; the records reach the store when it can be written again: at the end of the run, or the next time the
store is opened (Store.open replays the journal of a run whose process has ended). A journal that reached the
store is removed. Records are idempotent (rows are replaced, the end is an update), so a replay that repeats
one is harmless.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servelab.results.faults import StoreUnavailable
from servelab.results.schema import StageStatus

if TYPE_CHECKING:
    from servelab.results.store import Store

JOURNAL_FILE = "store-journal.jsonl"


def read(path: Path) -> list[dict[str, Any]]:
    """The journal's records; a line cut short by a crash or a full disk is left out."""
    out = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict) and record.get("op") in APPLY:
            out.append(record)
    return out


def _stage(store: Store, r: dict) -> None:
    store.record_stage(
        r["run_id"], r["stage"], StageStatus(r["status"]), config=r["config"], repetition=r["repetition"],
        started_at=r["started_at"], ended_at=r["ended_at"], artifact=r["artifact"],
    )  # fmt: skip


def _metrics(store: Store, r: dict) -> None:
    store.record_metrics(
        r["run_id"], r["stage"], r["values"], config=r["config"], repetition=r["repetition"],
        units=r["units"], source=r["source"],
    )  # fmt: skip


def _finish(store: Store, r: dict) -> None:
    store.finish_run(r["run_id"], r["outcome"], r["ended_at"])


APPLY: dict[str, Callable[[Store, dict], None]] = {"stage": _stage, "metrics": _metrics, "finish": _finish}


def replay(store: Store, path: Path) -> int:
    """Write the journal's records to the store in one transaction and remove it; how many were written.
    Raises StoreUnavailable (the journal kept) when the store still cannot be written."""
    records = read(path)
    with store.transaction():
        for r in records:
            try:
                APPLY[r["op"]](store, r)
            except (KeyError, TypeError, ValueError):
                continue  # a record this servelab cannot read: the rest still reach the store
    path.unlink(missing_ok=True)
    return len(records)


class JournaledWriter:
    """The store's writes of one run, each appended to the run folder's journal first. After the store
    fails once, the rest go to the journal only (a busy store would make every row wait its timeout), and
    `flush` tries the store again."""

    def __init__(self, store: Store, run_dir: Path) -> None:
        self.store = store
        self.path = run_dir / JOURNAL_FILE
        self.error: str | None = None  # why the store could not be written, while it cannot
        self.pending: list[dict[str, Any]] = []  # records the store does not have yet

    def record_stage(self, run_id: str, stage: str, status: StageStatus, **kw: Any) -> None:
        fields = {"config": "", "repetition": 0, "started_at": None, "ended_at": None, "artifact": None} | kw
        self._write({"op": "stage", "run_id": run_id, "stage": stage, "status": str(status), **fields})

    def record_metrics(self, run_id: str, stage: str, values: Mapping[str, float | None], **kw: Any) -> None:
        fields: dict[str, Any] = {"config": "", "repetition": 0, "units": {}, "source": "measured"} | kw
        fields["units"] = dict(fields["units"] or {})
        self._write({"op": "metrics", "run_id": run_id, "stage": stage, "values": dict(values), **fields})

    def finish_run(self, run_id: str, outcome: str, ended_at: str | None = None) -> None:
        ended_at = ended_at or datetime.now(UTC).isoformat(timespec="seconds")  # as the store's own times
        self._write({"op": "finish", "run_id": run_id, "outcome": str(outcome), "ended_at": ended_at})

    def _write(self, record: dict[str, Any]) -> None:
        self._append(record)
        if self.error is not None:
            self.pending.append(record)
            return
        try:
            APPLY[record["op"]](self.store, record)
        except StoreUnavailable as e:
            self.error = e.message
            self.pending.append(record)

    def _append(self, record: dict[str, Any]) -> None:
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            pass  # the folder's disk is full too: the store (or the run's result in memory) still has it

    def flush(self) -> bool:
        """Whether the store has every record: the journal replayed (and removed) now if it did not."""
        if self.error is None:
            self.path.unlink(missing_ok=True)
            return True
        try:
            replay(self.store, self.path)
        except StoreUnavailable as e:
            self.error = e.message
            return False
        self.error, self.pending = None, []
        return True

    def pending_values(self) -> list[dict[str, Any]]:
        """The metric records the store does not have yet."""
        return [r for r in self.pending if r["op"] == "metrics"]

    def pending_stages(self) -> list[dict[str, Any]]:
        return [r for r in self.pending if r["op"] == "stage"]
