"""The results store: runs, their stages and metrics, in an SQLite file (the embedded default; raw artifacts
in runs/<id>/ beside it) or in a PostgreSQL database that many machines share (`postgresql://user@host/db`;
raw artifacts stay in the run folder of the machine that ran it, under the user's data dir). One layer for
both: the same schema, migrations and queries (results/dialect.py says where the two differ).

Writers are safe across processes: WAL lets readers go on while one writer writes, every write is a
`BEGIN IMMEDIATE` transaction (it takes the write lock up front, so two writers never deadlock on a lock
upgrade), and the busy timeout makes a second writer wait for the lock instead of failing; a PostgreSQL
store's writers take one such lock too (an advisory lock), with the same timeout. A store that still cannot
be written (busy past the timeout, a full disk, read-only, a server that cannot be reached) raises
StoreUnavailable (one line, exit 1). Opening a store settles runs whose process ended without recording how
(results/runlock.py): their journal (results/journal.py) is written and they end as error, never `running`
forever.

    store = Store.open(path)            # None: the default location in the user's data dir
    run_id = store.start_run("dsv4-h200", provenance.collect(server_argv=argv, env=env))
    store.record_stage(run_id, "bench", "pass", config="random-conc-16", artifact="bench-16.json")
    store.record_metrics(run_id, "bench", {"p99_ttft_ms": 812.0}, config="random-conc-16", units={...})
    store.finish_run(run_id, "pass")
"""

import json
import math
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from servelab.errors import ServelabError
from servelab.redact import redact_argv, redact_env
from servelab.results.dialect import POSTGRES, SQLITE, Connection, Dialect
from servelab.results.faults import StoreUnavailable, unavailable
from servelab.results.journal import JOURNAL_FILE, replay
from servelab.results.location import server_url, shown
from servelab.results.provenance import Provenance
from servelab.results.runlock import abandoned
from servelab.results.schema import (
    METRIC_COLUMNS,
    METRIC_KEY,
    OUTCOMES,
    RUN_COLUMNS,
    SOURCES,
    STAGE_COLUMNS,
    STAGE_KEY,
    STAGE_STATUSES,
    StageStatus,
    migrate,
)

BUSY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Run:
    id: str
    name: str
    created_at: str
    started_at: str | None
    ended_at: str | None
    outcome: str
    provenance: Provenance
    source_path: str | None
    source_sha256: str | None


@dataclass(frozen=True)
class Stage:
    run_id: str
    stage: str
    config: str
    repetition: int
    status: StageStatus
    started_at: str | None
    ended_at: str | None
    artifact: str | None


@dataclass(frozen=True)
class Metric:
    run_id: str
    stage: str
    config: str
    repetition: int
    name: str
    value: float | None  # None: not a number (a NaN is stored as NULL)
    unit: str
    source: str


def default_path() -> Path:
    """`$XDG_DATA_HOME/servelab/results.db`, else `~/.local/share/servelab/results.db`."""
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "servelab" / "results.db"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_run_id() -> str:
    """Sortable by time, unique by its random tail: `20261130-160655-a1b2c3`."""
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL. Two processes creating one store at once can find it locked here without SQLite's
    busy handler being called (the switch needs an exclusive lock): wait as the busy timeout would."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def utf8(value: str, what: str) -> str:
    """A string SQLite can store: a command-line argument that was not UTF-8 reaches Python as surrogates,
    which no text column takes."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ServelabError(f"{what} {value!r}: not valid UTF-8") from None
    return value


def _check(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise ServelabError(f"{what} {value!r}: expected one of {', '.join(allowed)}")


class Store:
    def __init__(
        self,
        conn: Connection,
        path: Path | None,
        *,
        dialect: Dialect = SQLITE,
        root: Path | None = None,
        location: str | None = None,
    ):
        self.conn = conn
        self.path = path  # the SQLite file; None for a PostgreSQL store
        self.dialect = dialect
        # the folder of the run folders (runs/<id>/): beside an SQLite file, else the user's data dir
        self.root = root if root is not None else (path or default_path()).parent
        self.location = location or str(path)  # what messages name: the file, or the URL without credentials

    @classmethod
    def open(cls, path: Path | str | None = None) -> "Store":
        """Open (creating it and its folder if needed) and bring the schema up to date: the SQLite file at
        `path`, or the PostgreSQL store `path` is the URL of (another URL is refused in one line: it would
        become a directory tree and an SQLite file named after it)."""
        url = server_url(path)
        if url is not None:
            return cls._open_server(url)
        path = Path(path) if path is not None else default_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            _use_wal(conn)
        except (OSError, sqlite3.DatabaseError) as e:
            busy = unavailable(e, path) if "locked" in str(e) else None
            raise busy or ServelabError(
                f"{path}: cannot open as a results store (an SQLite file): {e}"
            ) from e
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        try:
            migrate(conn, str(path))
        except sqlite3.OperationalError as e:
            conn.close()
            busy = unavailable(e, path)
            if busy is None:
                raise
            raise busy from e
        store = cls(conn, path)
        store.settle_abandoned()
        return store

    @classmethod
    def _open_server(cls, url: str) -> "Store":
        where = shown(url)
        try:
            # the [postgres] extra: psycopg loads for a PostgreSQL store only (start-up time of the rest)
            from servelab.results import postgres  # noqa: PLC0415
        except ImportError as e:
            if "psycopg" not in f"{e.name} {e}":
                raise
            raise ServelabError(
                f"{where}: a PostgreSQL store needs psycopg: pip install 'servelab[postgres]'", field="store"
            ) from None
        conn = postgres.connect(url, where, BUSY_TIMEOUT_S)
        try:
            migrate(conn, where, dialect=POSTGRES)
        except BaseException:
            conn.close()
            raise
        store = cls(conn, None, dialect=POSTGRES, root=default_path().parent, location=where)
        store.settle_abandoned()
        return store

    def settle_abandoned(self) -> list[str]:
        """End the runs still `running` whose process is gone (nobody holds their run lock): what their
        journal kept is written, and a run it does not say the end of ends as error. Left for the next open
        when the store cannot be written now. Returns the runs settled."""
        rows = self.conn.execute(
            "SELECT id FROM runs WHERE outcome = 'running' AND source_sha256 IS NULL"
        ).fetchall()
        settled = []
        for (run_id,) in rows:
            run_dir = self.root / "runs" / str(run_id)
            if not abandoned(run_dir):
                continue
            try:
                with self.transaction():
                    if (run_dir / JOURNAL_FILE).exists():
                        replay(self, run_dir / JOURNAL_FILE)
                    self.conn.execute(
                        "UPDATE runs SET outcome = 'error', ended_at = ? "
                        "WHERE id = ? AND outcome = 'running'",
                        (now(), run_id),
                    )
            except StoreUnavailable:
                break  # read-only or busy: the next open settles them
            settled.append(str(run_id))
        return settled

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction; calls inside it join it, so a whole run can be written all or nothing."""
        if self.conn.in_transaction:
            yield
            return
        try:
            for statement in self.dialect.begin:
                self.conn.execute(statement)
            try:
                yield
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        except (sqlite3.OperationalError, OSError) as e:
            if self.conn.in_transaction:  # a COMMIT that failed (a full disk) leaves the transaction open
                self.conn.execute("ROLLBACK")
            busy = unavailable(e, self.location)
            if busy is None:
                raise
            raise busy from e
        except ServelabError:  # PostgreSQL's errors, as its connection says them: busy taking the lock too
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    def run_dir(self, run_id: str) -> Path:
        """The folder for a run's raw artifacts (bench JSON, eval outputs, server log), created on demand."""
        path = self.root / "runs" / run_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def artifact_path(self, run_id: str, artifact: str) -> Path:
        """Where a stage's artifact is: `servelab run` records it relative to the run's folder, an import
        relative to the store's folder (`runs/<id>/<file>`); an absolute path is itself. A PostgreSQL store's
        artifacts are on the machine that wrote them: elsewhere the path names no file."""
        path = Path(artifact)
        if path.is_absolute():
            return path
        in_run = self.root / "runs" / run_id / path
        return in_run if in_run.exists() else self.root / path

    # writers

    def start_run(
        self,
        name: str,
        provenance: Provenance | None = None,
        *,
        run_id: str | None = None,
        started_at: str | None = None,
        outcome: str = "running",
        ended_at: str | None = None,
        source_path: str | None = None,
        source_sha256: str | None = None,
    ) -> str:
        """A new run; `started_at` defaults to now for a run measured here, while an imported run (with a
        `source_sha256`) keeps what its file says, or nothing, and comes with its outcome and end."""
        _check(outcome, OUTCOMES, "run outcome")
        utf8(name, "run name")
        p = provenance or Provenance()
        run_id = run_id or new_run_id()
        with self.transaction():
            self.conn.execute(
                "INSERT INTO runs (id, name, created_at, started_at, ended_at, outcome, servelab_version,"
                " git_sha, recipe_fingerprint, image_digest, server_argv, env, gpu, driver, host,"
                " source_path, source_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    name,
                    now(),
                    started_at or (None if source_sha256 else now()),
                    ended_at,
                    outcome,
                    p.servelab_version,
                    p.git_sha,
                    p.recipe_fingerprint,
                    p.image_digest,
                    json.dumps(redact_argv(p.server_argv)),
                    json.dumps(redact_env(p.env)),
                    p.gpu,
                    p.driver,
                    p.host,
                    source_path,
                    source_sha256,
                ),
            )
        return run_id

    def record_stage(
        self,
        run_id: str,
        stage: str,
        status: StageStatus,
        *,
        config: str = "",
        repetition: int = 0,
        started_at: str | None = None,
        ended_at: str | None = None,
        artifact: str | None = None,
    ) -> None:
        """Insert or update one (stage, config, repetition); a later call (running, then pass) replaces it."""
        _check(status, STAGE_STATUSES, "stage status")
        with self.transaction():
            self.conn.execute(
                self.dialect.upsert("stages", STAGE_COLUMNS, STAGE_KEY),
                (run_id, stage, config, repetition, status, started_at, ended_at, artifact),
            )

    def record_metrics(
        self,
        run_id: str,
        stage: str,
        values: Mapping[str, float | None],
        *,
        config: str = "",
        repetition: int = 0,
        units: dict[str, str] | None = None,
        source: str = "measured",
    ) -> None:
        _check(source, SOURCES, "metric source")
        units = units or {}
        with self.transaction():
            self.conn.executemany(
                self.dialect.upsert("metrics", METRIC_COLUMNS, METRIC_KEY),
                [
                    (
                        run_id,
                        stage,
                        config,
                        repetition,
                        name,
                        _nan_as_null(value),
                        units.get(name, ""),
                        source,
                    )
                    for name, value in values.items()
                ],
            )

    def finish_run(self, run_id: str, outcome: str, ended_at: str | None = None) -> None:
        _check(outcome, OUTCOMES, "run outcome")
        with self.transaction():
            self.conn.execute(
                "UPDATE runs SET outcome = ?, ended_at = ? WHERE id = ?", (outcome, ended_at or now(), run_id)
            )

    # readers

    def list_runs(self, name: str | None = None, limit: int | None = None) -> list[Run]:
        """Newest first; only those called `name` when given."""
        if name is not None:
            utf8(name, "run name")
        sql = "SELECT * FROM runs" + (" WHERE name = ?" if name is not None else "")
        sql += " ORDER BY created_at DESC, rowid DESC" + (f" LIMIT {int(limit)}" if limit else "")
        return [_run(row) for row in self.conn.execute(sql, (name,) if name is not None else ())]

    def get_run(self, ref: str) -> Run:
        """A run by its id or a unique prefix of it."""
        utf8(ref, "run")
        rows = self.conn.execute(
            f"SELECT * FROM runs WHERE id = ? OR id {self.dialect.like} ? ESCAPE '\\' ORDER BY id",
            (ref, ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"),
        ).fetchall()
        exact = [r for r in rows if r["id"] == ref]
        if exact or len(rows) == 1:
            return _run((exact or rows)[0])
        if rows:
            raise ServelabError(f"run {ref!r} is ambiguous: {', '.join(r['id'] for r in rows[:5])}")
        raise ServelabError(f"no run {ref!r} in {self.location} (servelab results list shows them)")

    def find_runs(self, ref: str) -> list[Run]:
        """A run id (or unique prefix), else every run with that name: one side of a comparison."""
        named = self.list_runs(name=ref)
        if named:
            return named
        return [self.get_run(ref)]

    def find_import(self, sha256: str) -> Run | None:
        row = self.conn.execute("SELECT * FROM runs WHERE source_sha256 = ?", (sha256,)).fetchone()
        return _run(row) if row else None

    def stages(self, run_id: str) -> list[Stage]:
        rows = self.conn.execute(
            "SELECT * FROM stages WHERE run_id = ? ORDER BY stage, config, repetition", (run_id,)
        )
        return [
            Stage(
                run_id=row["run_id"],
                stage=_text(row["stage"]),
                config=_text(row["config"]),
                repetition=_integer(row["repetition"]),
                status=StageStatus(row["status"]),
                started_at=_text_or_none(row["started_at"]),
                ended_at=_text_or_none(row["ended_at"]),
                artifact=_text_or_none(row["artifact"]),
            )
            for row in rows
        ]

    def metrics(self, run_id: str) -> list[Metric]:
        rows = self.conn.execute(
            "SELECT * FROM metrics WHERE run_id = ? ORDER BY stage, config, name, repetition", (run_id,)
        )
        return [
            Metric(
                run_id=row["run_id"],
                stage=_text(row["stage"]),
                config=_text(row["config"]),
                repetition=_integer(row["repetition"]),
                name=_text(row["name"]),
                value=_number(row["value"]),
                unit=_text(row["unit"]),
                source=row["source"],
            )
            for row in rows
        ]

    def metric_counts(self) -> dict[str, int]:
        rows = self.conn.execute("SELECT run_id, count(*) FROM metrics GROUP BY run_id")
        return {run_id: n for run_id, n in rows}

    # copying between stores

    def copy_run(self, run: Run, stages: Sequence[Stage], metrics: Sequence[Metric]) -> bool:
        """Write a run of another store with its stages and metrics, as that store has them, all or nothing;
        False (nothing written) when this store has it already: its id, or an import of the same file."""
        _check(run.outcome, OUTCOMES, "run outcome")
        p = run.provenance
        row = (
            run.id, utf8(run.name, "run name"), run.created_at, run.started_at, run.ended_at, run.outcome,
            p.servelab_version, p.git_sha, p.recipe_fingerprint, p.image_digest,
            json.dumps(redact_argv(p.server_argv)), json.dumps(redact_env(p.env)), p.gpu, p.driver, p.host,
            run.source_path, run.source_sha256,
        )  # fmt: skip
        groups: dict[tuple[str, str, int, str], list[Metric]] = {}
        for m in metrics:  # one write per stage row and source
            groups.setdefault((m.stage, m.config, m.repetition, m.source), []).append(m)
        with self.transaction():
            inserted = self.conn.execute(
                f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' * len(RUN_COLUMNS))})"
                " ON CONFLICT DO NOTHING",
                row,
            ).rowcount
            if not inserted:
                return False
            for s in stages:
                self.record_stage(
                    run.id, s.stage, s.status, config=s.config, repetition=s.repetition,
                    started_at=s.started_at, ended_at=s.ended_at, artifact=s.artifact,
                )  # fmt: skip
            for (stage, config, repetition, source), group in groups.items():
                self.record_metrics(
                    run.id, stage, {m.name: m.value for m in group}, config=config, repetition=repetition,
                    units={m.name: m.unit for m in group}, source=source,
                )  # fmt: skip
        return True


# Readers take a row as SQLite gives it: a column's type is only an affinity, so a row another tool (or a
# hand with sqlite3) wrote can hold text in a REAL column, a number in a TEXT one, or JSON that is not.


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _text_or_none(value: object) -> str | None:
    return None if value is None else _text(value)


def _integer(value: object) -> int:
    return value if isinstance(value, int) else 0


def _nan_as_null(value: float | None) -> float | None:
    """A NaN as NULL, as SQLite stores it (PostgreSQL would keep it)."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _number(value: object) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None  # type: ignore[arg-type]


def _json(value: object, kind: type[list] | type[dict]) -> list | dict:
    """A JSON column as a list or dict; anything else (not JSON, another shape, nested too deep) as empty."""
    try:
        parsed = json.loads(value) if isinstance(value, str | bytes) else None
    except (ValueError, RecursionError):
        parsed = None
    return parsed if isinstance(parsed, kind) else kind()


def _run(row: Any) -> Run:  # sqlite3.Row, or results/postgres.py's Row
    env = _json(row["env"], dict)
    return Run(
        id=_text(row["id"]),
        name=_text(row["name"]),
        created_at=_text(row["created_at"]),
        started_at=_text_or_none(row["started_at"]),
        ended_at=_text_or_none(row["ended_at"]),
        outcome=row["outcome"],
        provenance=Provenance(
            servelab_version=_text_or_none(row["servelab_version"]),
            git_sha=_text_or_none(row["git_sha"]),
            recipe_fingerprint=_text_or_none(row["recipe_fingerprint"]),
            image_digest=_text_or_none(row["image_digest"]),
            server_argv=[_text(a) for a in _json(row["server_argv"], list)],
            env={_text(k): _text(v) for k, v in env.items()},  # type: ignore[union-attr]
            gpu=_text_or_none(row["gpu"]),
            driver=_text_or_none(row["driver"]),
            host=_text_or_none(row["host"]),
        ),
        source_path=_text_or_none(row["source_path"]),
        source_sha256=_text_or_none(row["source_sha256"]),
    )
