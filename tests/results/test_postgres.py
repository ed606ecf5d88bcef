"""The shared results store on a real PostgreSQL server (tests/results/pgserver.py): the same schema,
migrations and answers as SQLite, two writer processes at once, `results push`, a URL that never becomes a
directory, credentials that never reach a log, a result or an error, and psycopg loaded only for it."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.errors import ServelabError
from servelab.results import store as store_module
from servelab.results.dialect import POSTGRES
from servelab.results.faults import StoreUnavailable
from servelab.results.provenance import Provenance
from servelab.results.push import push
from servelab.results.schema import MIGRATIONS, SCHEMA_VERSION, migrate
from servelab.results.store import Store

SRC = str(Path(__file__).resolve().parents[2] / "src")
SECRET = "pw-0f9e8d7c-SECRET"


def cli(*args: str, cwd: Path, data: Path, env: dict[str, str] | None = None):
    """`servelab ARGS` in a fresh process, its data dir (where a server store's run folders go) `data`."""
    return subprocess.run(
        [sys.executable, "-m", "servelab.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": SRC, "XDG_DATA_HOME": str(data), "COLUMNS": "200", **(env or {})},
    )


@pytest.fixture(autouse=True)
def data_dir(monkeypatch, tmp_path) -> Path:
    """A server store's run folders go to the user's data dir: this test's, never the real one."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def _fill(store: Store) -> list[str]:
    """Two runs written as `servelab run` and an import write them; their ids, oldest first."""
    first = store.start_run("qwen-cpu", Provenance(server_argv=["vllm", "serve", "m"], host="box"))
    store.record_stage(first, "bench", "running", config="random-conc-4", repetition=1)
    store.record_stage(first, "bench", "pass", config="random-conc-4", repetition=1, artifact="b.json")
    store.record_metrics(
        first, "bench", {"p99_ttft_ms": 12.5, "nan": float("nan"), "n": 3}, config="random-conc-4",
        repetition=1, units={"p99_ttft_ms": "ms"},
    )  # fmt: skip
    store.record_metrics(first, "gsm8k", {"exact_match": 0.91})
    store.finish_run(first, "pass")
    second = store.start_run("qwen-cpu", started_at="2026-11-30T10:00:00+00:00", source_sha256="f" * 64)
    store.finish_run(second, "fail")
    return [first, second]


def _answers(store: Store) -> list:
    """Everything the readers answer about the store's runs."""
    out: list = []
    for run in store.list_runs():
        out.append((run, store.stages(run.id), store.metrics(run.id)))
    return [out, store.metric_counts(), [r.id for r in store.find_runs("qwen-cpu")]]


@pytest.mark.slow  # 0.8 s of CPU a case: a real PostgreSQL and CLI processes
def test_postgres_answers_as_sqlite(pg_url, tmp_path):
    with Store.open(tmp_path / "r.db") as lite, Store.open(pg_url) as pg:
        assert (lite.dialect.name, pg.dialect.name) == ("sqlite", "postgresql")
        ids = _fill(lite)
        for run_id in ids:  # the same runs, ids and times, through the copy both stores have
            run = lite.get_run(run_id)
            assert pg.copy_run(run, lite.stages(run_id), lite.metrics(run_id))
        assert _answers(pg) == _answers(lite)
        # newest first, the runs created in one second in the order they were written (SQLite's rowid)
        assert [r.id for r in pg.list_runs()] == ids[::-1]
        first = ids[0]
        assert pg.get_run(first[:-2]).id == first  # a unique prefix will do
        assert pg.get_run(first[:-3] + first[-3:-2].upper()).id == first  # whatever its case, as SQLite
        with pytest.raises(ServelabError, match="no run 'nope' in postgresql://127.0.0.1"):
            pg.get_run("nope")
        with pytest.raises(ServelabError, match="run outcome 'done'"):
            pg.finish_run(first, "done")
        [(value, unit)] = [(m.value, m.unit) for m in pg.metrics(first) if m.name == "p99_ttft_ms"]
        assert (value, unit) == (12.5, "ms")
        assert pg.find_import("f" * 64).id == ids[1]
        # the same tables, columns and indexes (PostgreSQL's rowid stands for SQLite's implicit one)
        assert _schema_pg(pg) == _schema_sqlite(lite) | {("runs", "rowid")}


def _schema_sqlite(store: Store) -> set[tuple[str, str]]:
    tables = [r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    cols = {(t, r[1]) for t in tables for r in store.conn.execute(f"PRAGMA table_info({t})")}
    indexes = store.conn.execute("SELECT tbl_name, name FROM sqlite_master WHERE type = 'index'")
    return cols | {(t, i) for t, i in indexes if not i.startswith("sqlite_autoindex")}


def _schema_pg(store: Store) -> set[tuple[str, str]]:
    cols = store.conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
    )
    indexes = store.conn.execute("SELECT tablename, indexname FROM pg_indexes WHERE schemaname = 'public'")
    found = {(t, c) for t, c in cols} | {(t, i) for t, i in indexes if not i.endswith("_pkey")}
    return {(t, c) for t, c in found if t != "servelab_schema"}  # PostgreSQL's home of the schema version


def test_a_value_is_kept_in_double_precision(pg_url):
    with Store.open(pg_url) as pg:
        run_id = pg.start_run("r")
        pg.record_metrics(run_id, "bench", {"x": 0.1 + 0.2, "inf": float("inf")})
        values = {m.name: m.value for m in pg.metrics(run_id)}
    assert values == {"x": 0.1 + 0.2, "inf": None}  # not a REAL's 4 bytes; infinity read as unknown


def test_migrations_bring_an_older_postgres_store_forward_and_refuse_a_newer(pg_url):
    with Store.open(pg_url) as pg:  # a connection to run migration 1 only, as an older servelab did
        conn = pg.conn
        conn.execute("DROP TABLE metrics; DROP TABLE stages; DROP TABLE runs; DROP TABLE servelab_schema")
        migrate(conn, pg.location, target=1, dialect=POSTGRES)
        assert POSTGRES.version(conn) == 1
        conn.execute("INSERT INTO runs (id, name, created_at, outcome) VALUES ('r1', 'old', '2026', 'pass')")
    with Store.open(pg_url) as pg:
        assert POSTGRES.version(pg.conn) == SCHEMA_VERSION == len(MIGRATIONS)
        assert pg.get_run("r1").name == "old"
        pg.start_run("new", source_sha256="abc")  # the column migration 2 added
        assert pg.find_import("abc").name == "new"
        pg.conn.execute("UPDATE servelab_schema SET version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(ServelabError, match="newer than this servelab knows"):
        Store.open(pg_url)


def test_a_busy_postgres_store_is_unavailable_in_one_line_then_written(pg_url, monkeypatch):
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.2)
    with Store.open(pg_url) as holder, Store.open(pg_url) as writer:
        run_id = writer.start_run("r")
        with holder.transaction():  # another writer holds the store's write lock
            with pytest.raises(StoreUnavailable, match="cannot be written now.*lock timeout"):
                writer.record_metrics(run_id, "bench", {"x": 1.0})
            assert not writer.conn.in_transaction  # rolled back: the connection goes on
        writer.record_metrics(run_id, "bench", {"x": 1.0})
        assert [m.value for m in holder.metrics(run_id)] == [1.0]


WRITER = """
import sys
from servelab.results.store import Store
url, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = Store.open(url)
for i in range(n):
    run_id = store.start_run(tag)
    for rep in range(3):
        store.record_stage(run_id, "bench", "pass", config=f"c-{i}", repetition=rep)
        store.record_metrics(run_id, "bench", {"a": i, "b": rep}, config=f"c-{i}", repetition=rep)
    store.finish_run(run_id, "pass")
"""


@pytest.mark.slow  # 0.9 s of CPU a case: a real PostgreSQL and CLI processes
def test_two_writer_processes_on_one_postgres_store_lose_nothing(pg_url):
    n = 40  # neither process finds the schema: both create and migrate it at once
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, pg_url, tag, str(n)],
            env={**os.environ, "PYTHONPATH": SRC},
            stderr=subprocess.PIPE,
        )
        for tag in ("one", "two")
    ]
    for w in writers:
        _, err = w.communicate(timeout=180)
        assert w.returncode == 0, err.decode()
    with Store.open(pg_url) as store:
        for tag in ("one", "two"):
            runs = store.list_runs(name=tag)
            assert len(runs) == n and {r.outcome for r in runs} == {"pass"}
        assert store.conn.execute("SELECT count(*) FROM stages").fetchone()[0] == 2 * n * 3
        assert store.conn.execute("SELECT count(*) FROM metrics").fetchone()[0] == 2 * n * 3 * 2
        assert POSTGRES.version(store.conn) == SCHEMA_VERSION


@pytest.mark.parametrize("kind", ["postgres", "sqlite"])
def test_push_copies_each_run_once(kind, tmp_path, request):
    target = request.getfixturevalue("pg_url") if kind == "postgres" else tmp_path / "team.db"
    with Store.open(tmp_path / "local.db") as local, Store.open(target) as shared:
        ids = _fill(local)
        running = local.start_run("still-going")
        first = push(local, shared, local.list_runs())
        assert (first.copied, first.present, first.running) == (ids, [], [running])
        again = push(local, shared, local.list_runs())
        assert (again.copied, again.present, again.running) == ([], ids, [running])
        assert [r.id for r in shared.list_runs()] == ids[::-1]
        assert _answers(shared)[0] == _answers(local)[0][1:]  # every run but the running one, whole
        # the same file imported on another machine is the same run: already there
        other = Store.open(tmp_path / "other.db")
        twin = other.start_run("elsewhere", source_sha256="f" * 64)
        other.finish_run(twin, "pass")
        assert push(other, shared, other.list_runs()).present == [twin]
        other.close()


@pytest.mark.slow  # 1.9 s of CPU a case: a real PostgreSQL and CLI processes
def test_push_from_the_cli_reports_what_it_copied(pg_url, tmp_path, data_dir, write_json, vllm_result):
    results = [write_json(f"r{i}.json", vllm_result(median_ttft_ms=100.0 + i)) for i in range(2)]
    local = tmp_path / "lab.db"
    r = cli(
        "results", "import", *results, "--name", "base", "--store", str(local), cwd=tmp_path, data=data_dir
    )
    assert r.returncode == 0, r.stderr
    url = pg_url.replace("@", f":{SECRET}@")  # trust auth: the password is sent and ignored
    r = cli("results", "push", "--to", url, "--store", str(local), cwd=tmp_path, data=data_dir)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"pushed to {pg_url.replace('servelab@', '')}: 2 copied, 0 already there"
    r = cli("results", "push", "--to", url, "--store", str(local), "--json", cwd=tmp_path, data=data_dir)
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    assert answer["schema"] == "servelab.results.push" and len(answer["present"]) == 2
    assert answer["copied"] == answer["running"] == [] and SECRET not in r.stdout
    r = cli("results", "list", "--store", url, "--json", cwd=tmp_path, data=data_dir)
    assert [run["name"] for run in json.loads(r.stdout)["runs"]] == ["base", "base"]


WORKLOAD = {
    "name": "w", "gpu": "H200", "vllm": {"model": "m"},
    "vllm_bench": {"configs": [{"name": "s", "input_len": 8, "output_len": 2, "num_prompts": 2,
                                "max_concurrency": 1}]},
}  # fmt: skip


@pytest.mark.slow  # 5.3 s of CPU a case: a real PostgreSQL and CLI processes
def test_a_url_never_becomes_a_directory_and_its_password_is_never_shown(
    pg_url, tmp_path, data_dir, write_json, vllm_result
):
    work = tmp_path / "work"
    work.mkdir()
    (work / "wl.json").write_text(json.dumps(WORKLOAD))
    result = write_json("r.json", vllm_result())
    url = pg_url.replace("@", f":{SECRET}@") + f"?application_name=x&password={SECRET}"
    said = []
    for args, code in [
        (("results", "list", "--store", url), 0),
        (("results", "import", result, "--store", url), 0),
        (("results", "export", "-f", "json", "--store", url), 0),
        (("report", "--run", "20", "-o", "page.html", "--store", url), 0),
        # the server is not there (port 9): the run ends in error, stored with its redacted provenance
        (("run", "wl.json", "--base-url", f"http://u:{SECRET}@127.0.0.1:9", "--store", url), 3),
        (("results", "show", "w", "--store", url), 2),  # a name, not a run id: refused in one line
    ]:
        r = cli(*args, cwd=work, data=data_dir)
        assert r.returncode == code, (args, r.stdout, r.stderr)
        said.append(r.stdout + r.stderr)
    assert "Traceback" not in "".join(said)
    assert "postgresql://127.0.0.1:" in said[0] or "no runs in postgresql://127.0.0.1:" in said[0]
    assert sorted(p.name for p in work.iterdir()) == ["page.html", "wl.json"]  # no tree named after the URL
    assert not any("postgres" in p.name for p in tmp_path.rglob("*"))
    # the secret is nowhere: not printed, not in a run folder's files, not in any row of the store
    everything = "".join(said) + "".join(
        p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()
    )
    with Store.open(pg_url) as store:
        for table in ("runs", "stages", "metrics"):
            everything += json.dumps(store.conn.execute(f"SELECT * FROM {table}").fetchall(), default=list)
        [run] = store.list_runs(name="w")
        assert run.outcome == "error" and (data_dir / "servelab" / "runs" / run.id / "summary.json").is_file()
    assert SECRET not in everything


@pytest.mark.parametrize(
    ("where", "code", "says"),
    [
        ("nodb", 2, 'database "nodb" does not exist'),
        ("port", 1, "cannot be reached now"),
    ],
)
def test_a_store_that_cannot_be_opened_says_so_in_one_line_without_its_password(
    postgres_server, tmp_path, where, code, says
):
    url = postgres_server.url("nodb", SECRET)
    if where == "port":
        url = url.replace(f":{postgres_server.port}/", ":9/")
    r = cli("results", "list", "--store", url, cwd=tmp_path, data=tmp_path / "xdg")
    assert r.returncode == code, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("error: ") and says in line and "postgresql://127.0.0.1:" in line, line
    assert SECRET not in line and list(tmp_path.iterdir()) == []
    with pytest.raises(StoreUnavailable if code == 1 else ServelabError):
        Store.open(url)


def test_without_psycopg_a_postgres_store_says_what_to_install(tmp_path):
    probe = (
        "import sys; sys.modules['psycopg'] = None; sys.argv = ['servelab', *sys.argv[1:]]\n"
        "from servelab.cli.entry import main; main()"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe, "results", "list", "--store", f"postgres://u:{SECRET}@127.0.0.1:9/db"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": SRC},
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert "pip install 'servelab[postgres]'" in line and SECRET not in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # 0.8 s of CPU a case: a real PostgreSQL and CLI processes
def test_commands_on_an_sqlite_store_never_import_psycopg(tmp_path):
    probe = (
        "import sys; sys.argv = ['servelab', *sys.argv[1:]]\n"
        "from servelab.cli.entry import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'psycopg'), file=sys.stderr)"
    )
    for args in (
        ["results", "list", "--store", "s.db"],
        ["results", "push", "--to", "t.db", "--store", "s.db"],
    ):
        r = subprocess.run(
            [sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": SRC},
        )  # fmt: skip
        assert r.stderr.strip().splitlines()[-1] == "[]", (args, r.stderr)
    assert sqlite3.connect(tmp_path / "t.db").execute("SELECT count(*) FROM runs").fetchone() == (0,)
