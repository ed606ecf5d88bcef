"""The store's SQL schema as an ordered list of migrations, one text for SQLite and PostgreSQL; the store's
schema version (SQLite's `PRAGMA user_version`, a one-row table in PostgreSQL: results/dialect.py) is how
many have run.

A migration is only ever appended, never edited: a store written by an older servelab is brought forward
on open.
"""

from enum import StrEnum

from servelab.errors import ServelabError
from servelab.results.dialect import SQLITE, Connection, Dialect


class RunOutcome(StrEnum):
    """How a run ended (running until it does)."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    RUNNING = "running"


class StageStatus(StrEnum):
    """How one stage row ended: pass, error, skipped (not run: an earlier failure or an interruption stopped
    the run); fail and running as imported runs and a stage in progress have them."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    RUNNING = "running"
    SKIPPED = "skipped"


# The values as the migrations below wrote them into the tables' CHECKs: frozen, like the migrations (the
# enums above must keep these values so that stores written before read; tests/results check they match).
OUTCOMES = ("pass", "fail", "error", "running")
STAGE_STATUSES = ("pass", "fail", "error", "running", "skipped")
SOURCES = ("measured", "predicted", "imported")


def _in(values: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


MIGRATIONS = [
    # 1: runs with provenance, their stages, and one row per metric value
    f"""
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        created_at TEXT NOT NULL,
        started_at TEXT,
        ended_at TEXT,
        outcome TEXT NOT NULL CHECK (outcome IN {_in(OUTCOMES)}),
        servelab_version TEXT,
        git_sha TEXT,
        recipe_fingerprint TEXT,
        image_digest TEXT,
        server_argv TEXT NOT NULL DEFAULT '[]',
        env TEXT NOT NULL DEFAULT '{{}}',
        gpu TEXT,
        driver TEXT,
        host TEXT
    );
    CREATE INDEX runs_name ON runs (name);
    CREATE TABLE stages (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        stage TEXT NOT NULL,
        config TEXT NOT NULL DEFAULT '',
        repetition INTEGER NOT NULL DEFAULT 0,
        status TEXT NOT NULL CHECK (status IN {_in(STAGE_STATUSES)}),
        started_at TEXT,
        ended_at TEXT,
        artifact TEXT,
        PRIMARY KEY (run_id, stage, config, repetition)
    );
    CREATE TABLE metrics (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        stage TEXT NOT NULL,
        config TEXT NOT NULL DEFAULT '',
        repetition INTEGER NOT NULL DEFAULT 0,
        name TEXT NOT NULL,
        value REAL,
        unit TEXT NOT NULL DEFAULT '',
        source TEXT NOT NULL CHECK (source IN {_in(SOURCES)}),
        PRIMARY KEY (run_id, stage, config, repetition, name)
    );
    """,
    # 2: imported runs remember their file and its content hash, so importing a file twice adds nothing
    """
    ALTER TABLE runs ADD COLUMN source_path TEXT;
    ALTER TABLE runs ADD COLUMN source_sha256 TEXT;
    CREATE UNIQUE INDEX runs_source_sha256 ON runs (source_sha256) WHERE source_sha256 IS NOT NULL;
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)
# the tables' columns in their order, and their keys, as the migrations above made them
STAGE_COLUMNS = ("run_id", "stage", "config", "repetition", "status", "started_at", "ended_at", "artifact")
STAGE_KEY = ("run_id", "stage", "config", "repetition")
METRIC_COLUMNS = ("run_id", "stage", "config", "repetition", "name", "value", "unit", "source")
METRIC_KEY = ("run_id", "stage", "config", "repetition", "name")
RUN_COLUMNS = (
    "id", "name", "created_at", "started_at", "ended_at", "outcome", "servelab_version", "git_sha",
    "recipe_fingerprint", "image_digest", "server_argv", "env", "gpu", "driver", "host", "source_path",
    "source_sha256",
)  # fmt: skip


def migrate(conn: Connection, path: str, target: int = SCHEMA_VERSION, dialect: Dialect = SQLITE) -> None:
    """Apply the migrations the store lacks, each in its own write transaction.

    The version is read again inside the transaction (which holds the store's write lock), so two processes
    opening a fresh store at once apply each migration exactly once. `conn` must be in autocommit mode
    (sqlite3's isolation_level=None).
    """
    if dialect.version(conn) == target:
        return  # up to date: readers never take the write lock
    while True:
        try:
            for statement in dialect.begin:  # PostgreSQL's BEGIN, then its lock: a busy lock leaves it open
                conn.execute(statement)
            dialect.prepare_version(conn)
            version = dialect.version(conn)
            if version > SCHEMA_VERSION:
                raise ServelabError(
                    f"{path}: results store schema version {version} is newer than this servelab knows "
                    f"({SCHEMA_VERSION}); upgrade servelab"
                )
            if version >= target:
                conn.execute("COMMIT")
                return
            for statement in dialect.statements(MIGRATIONS[version], version):
                conn.execute(statement)
            dialect.set_version(conn, version + 1)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # a PostgreSQL connection that broke has none left to roll back
                conn.execute("ROLLBACK")
            raise
