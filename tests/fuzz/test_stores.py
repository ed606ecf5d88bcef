"""Busy and full stores: a results store that cannot be written (another writer holds its lock past the busy
timeout; the disk under it is full) at each moment of a run (its start, a row, its end) and under a Ctrl-C.
What was measured is kept in the run folder's journal and reaches the store when it can be written; the
command ends in one line, never an internal error. A full disk is simulated at the store's write boundary
(SQLite's "database or disk is full" from the connection), as filling a real disk needs privileges CI has not.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from fuzzkit import hostile, tiny_workload, tried

from servelab.recipes.workload import parse_workload
from servelab.recipes.yamlio import read_yaml
from servelab.results import store as store_module
from servelab.results.faults import StoreUnavailable
from servelab.results.store import Store
from servelab.run.execute import RunOptions, execute
from servelab.run.plan import from_workload
from servelab.run.stage import Stage, StageName, StageOutput
from servelab.run.stages import BenchInterrupted, stage_registry

ATTACHED = RunOptions(base_url="http://127.0.0.1:9", model="m")  # the stand-in stage calls no server
WRITES = ("BEGIN", "INSERT", "UPDATE", "DELETE", "COMMIT")


class Faulty:
    """A store connection whose writes fail once `fault` is set: `full` as SQLite says a full disk, `busy`
    by another connection really holding the write lock (the busy timeout made short)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.conn = store.conn
        self.fault: str | None = None
        self.other: sqlite3.Connection | None = None
        store.conn = self  # type: ignore[assignment]

    def __getattr__(self, name):
        return getattr(self.conn, name)

    def set(self, fault: str) -> None:
        self.fault = fault
        if fault == "busy":
            self.other = sqlite3.connect(self.store.path, isolation_level=None)
            self.other.execute("BEGIN IMMEDIATE")  # held until clear()

    def clear(self) -> None:
        self.fault = None
        if self.other is not None:
            self.other.execute("ROLLBACK")
            self.other.close()
            self.other = None

    def _full(self, sql: str) -> None:
        if self.fault == "full" and sql.split(None, 1)[0].upper() in WRITES:
            raise sqlite3.OperationalError("database or disk is full")

    def execute(self, sql, *args):
        self._full(sql)
        return self.conn.execute(sql, *args)

    def executemany(self, sql, *args):
        self._full(sql)
        return self.conn.executemany(sql, *args)


def _plan(tmp_path: Path, repetitions: int = 3):
    config = {"name": "s", "input_len": 8, "output_len": 2, "num_prompts": 2, "max_concurrency": 1,
              "repetitions": repetitions}  # fmt: skip
    path = tiny_workload(tmp_path / "wl.yaml", vllm_bench={"configs": [config]})
    return from_workload(parse_workload(read_yaml(path), str(path)), str(path))


def _registry(on_row):
    """A bench stage that measures `completed` = 10 + its repetition; `on_row(repetition)` runs first."""

    class Bench(Stage):
        name = StageName.BENCH

        def run(self, target, call):
            on_row(call.repetition)
            return StageOutput({"completed": 10.0 + call.repetition}, {"completed": "requests"})

    return stage_registry(Bench)


@pytest.fixture(autouse=True)
def short_busy_timeout(monkeypatch):
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.2)


def _stored(path: Path) -> tuple[str, dict[int, float]]:
    with Store.open(path) as store:  # opening settles a run whose process has ended
        [run] = store.list_runs()
        return run.outcome, {m.repetition: m.value for m in store.metrics(run.id) if m.name == "completed"}


# when the store stops taking writes: before the first row, after it, before the run's end
MOMENTS = {"first-row": 0, "second-row": 1, "last-row": 2}


@pytest.mark.parametrize("moment", list(MOMENTS))
@pytest.mark.parametrize("fault", ["busy", "full"])
def test_measured_rows_reach_the_store_when_it_can_be_written(fault, moment, tmp_path):
    tried()
    db = tmp_path / "store" / "results.db"
    with Store.open(db) as store:
        faulty = Faulty(store)

        def on_row(rep: int) -> None:
            if rep == MOMENTS[moment]:
                faulty.set(fault)

        result = execute(_plan(tmp_path), store, ATTACHED, _registry(on_row), log=open("/dev/null", "w"))
        faulty.clear()
    assert result.exit_code == 3 and result.outcome == "error", result.errors
    assert any("cannot be written" in e and "store-journal.jsonl" in e for e in result.errors), result.errors
    assert [r.status for r in result.rows] == ["pass"] * 3  # the rows measured, whatever the store did
    assert json.loads((result.run_dir / "summary.json").read_text())["exit_code"] == 3
    outcome, completed = _stored(db)
    assert completed == {0: 10.0, 1: 11.0, 2: 12.0}, "a measured row was lost"
    assert outcome == "error"
    assert not (result.run_dir / "store-journal.jsonl").exists(), (
        "the journal stays after it reached the store"
    )


@pytest.mark.parametrize("fault", ["busy", "full"])
def test_ctrl_c_after_the_store_failed_still_keeps_what_was_measured(fault, tmp_path):
    tried()
    db = tmp_path / "store" / "results.db"
    with Store.open(db) as store:
        faulty = Faulty(store)

        def on_row(rep: int) -> None:
            if rep == 1:
                faulty.set(fault)
            if rep == 2:  # Ctrl-C mid-benchmark: the point keeps what it measured
                raise BenchInterrupted(2, StageOutput({"completed": 5.0}, {"completed": "requests"}))

        result = execute(_plan(tmp_path), store, ATTACHED, _registry(on_row), log=open("/dev/null", "w"))
        faulty.clear()
    assert result.exit_code == 130, result.errors
    outcome, completed = _stored(db)
    assert completed == {0: 10.0, 1: 11.0, 2: 5.0}
    assert outcome == "error"


@pytest.mark.parametrize("fault", ["busy", "full"])
def test_a_store_that_cannot_be_written_at_the_start_is_one_line(fault, tmp_path):
    tried()
    db = tmp_path / "store" / "results.db"
    with Store.open(db) as store:
        faulty = Faulty(store)
        faulty.set(fault)
        with pytest.raises(StoreUnavailable, match="cannot be written"):
            execute(_plan(tmp_path), store, ATTACHED, _registry(lambda rep: None), log=open("/dev/null", "w"))
        faulty.clear()
        assert store.list_runs() == []  # nothing measured, nothing half-recorded


def test_results_import_into_a_busy_store_is_one_line(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"completed": 4, "duration": 2.0, "max_concurrency": 1, "model_id": "m"}))
    db = tmp_path / "s.db"
    with Store.open(db):
        pass
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        r = hostile("results", "import", str(f), "--store", str(db), codes=(1,), keep=[f])
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert "cannot be written" in r.err and str(db) in r.err, r.err
