"""The store on real SQLite files: the run API, migrations from an older schema, and two writer processes."""

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.errors import ServelabError
from servelab.results.provenance import Provenance
from servelab.results.schema import MIGRATIONS, SCHEMA_VERSION
from servelab.results.store import Store, default_path

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_run_api_round_trip(tmp_path):
    with Store.open(tmp_path / "r.db") as store:
        run_id = store.start_run("qwen-cpu", Provenance(server_argv=["vllm", "serve", "m"], host="box"))
        store.record_stage(run_id, "bench", "running", config="random-conc-4", repetition=1)
        store.record_stage(run_id, "bench", "pass", config="random-conc-4", repetition=1, artifact="b.json")
        store.record_metrics(
            run_id,
            "bench",
            {"p99_ttft_ms": 12.5, "nan": float("nan")},
            config="random-conc-4",
            repetition=1,
            units={"p99_ttft_ms": "ms"},
        )
        store.record_metrics(run_id, "gsm8k", {"exact_match": 0.91})
        store.finish_run(run_id, "pass")

        run = store.get_run(run_id[:-2])  # a unique prefix will do
        assert run.id == run_id and run.outcome == "pass" and run.ended_at
        assert run.provenance.server_argv == ["vllm", "serve", "m"] and run.provenance.host == "box"
        [stage] = store.stages(run_id)
        assert (stage.status, stage.repetition, stage.artifact) == ("pass", 1, "b.json")
        values = {(m.stage, m.name): (m.value, m.unit, m.source) for m in store.metrics(run_id)}
        assert values == {
            ("bench", "nan"): (None, "", "measured"),
            ("bench", "p99_ttft_ms"): (12.5, "ms", "measured"),
            ("gsm8k", "exact_match"): (0.91, "", "measured"),
        }
        other = store.start_run("qwen-cpu")
        assert [r.id for r in store.find_runs("qwen-cpu")] == [other, run_id]  # newest first
        assert store.run_dir(run_id) == tmp_path / "runs" / run_id and (tmp_path / "runs" / run_id).is_dir()
        with pytest.raises(ServelabError, match="no run 'nope'"):
            store.get_run("nope")
        with pytest.raises(ServelabError, match="run outcome 'done'"):
            store.finish_run(run_id, "done")


def test_default_location(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "servelab" / "results.db"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_path() == tmp_path / ".local" / "share" / "servelab" / "results.db"
    with Store.open() as store:
        assert store.path.is_file()


def test_wal_and_version(tmp_path):
    with Store.open(tmp_path / "r.db") as store:
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_migrates_a_store_written_at_schema_version_1(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0])
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO runs (id, name, created_at, outcome) VALUES ('r1', 'old', '2026-01-01', 'pass')"
    )
    conn.execute(
        "INSERT INTO metrics (run_id, stage, name, value, source) VALUES ('r1', 'bench', 'x', 1, 'measured')"
    )
    conn.commit()
    conn.close()

    with Store.open(path) as store:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
        run = store.get_run("r1")
        assert (run.name, run.source_sha256) == ("old", None)
        assert [m.value for m in store.metrics("r1")] == [1.0]
        store.start_run("new", source_sha256="abc")  # the column migration 2 added
        assert store.find_import("abc").name == "new"


def test_refuses_a_newer_schema_and_a_file_that_is_not_sqlite(tmp_path):
    newer = tmp_path / "newer.db"
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(ServelabError, match="newer than this servelab knows"):
        Store.open(newer)
    junk = tmp_path / "junk.db"
    junk.write_text("not a database, just text that is long enough to have a header" * 10)
    with pytest.raises(ServelabError, match="junk.db: cannot open as a results store"):
        Store.open(junk)


WRITER = """
import sys
from servelab.results.store import Store
path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = Store.open(path)
for i in range(n):
    run_id = store.start_run(tag)
    for rep in range(3):
        store.record_stage(run_id, "bench", "pass", config=f"c-{i}", repetition=rep)
        store.record_metrics(run_id, "bench", {"a": i, "b": rep}, config=f"c-{i}", repetition=rep)
    store.finish_run(run_id, "pass")
"""


def test_two_writer_processes_lose_nothing(tmp_path):
    path = tmp_path / "shared" / "r.db"  # neither process finds it: both create and migrate it at once
    env = {**os.environ, "PYTHONPATH": SRC}
    n = 40
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), tag, str(n)], env=env, stderr=subprocess.PIPE
        )
        for tag in ("one", "two")
    ]
    for w in writers:
        _, err = w.communicate(timeout=120)
        assert w.returncode == 0, err.decode()
    with Store.open(path) as store:
        for tag in ("one", "two"):
            runs = store.list_runs(name=tag)
            assert len(runs) == n and {r.outcome for r in runs} == {"pass"}
        assert store.conn.execute("SELECT count(*) FROM stages").fetchone()[0] == 2 * n * 3
        assert store.conn.execute("SELECT count(*) FROM metrics").fetchone()[0] == 2 * n * 3 * 2
