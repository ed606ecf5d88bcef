"""The store's SQL schema as an ordered list of migrations; `PRAGMA user_version` is how many have run.

A migration is only ever appended, never edited: a store written by an older servelab is brought forward
on open.
"""

import sqlite3
from enum import StrEnum

from servelab.errors import ServelabError


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


def migrate(conn: sqlite3.Connection, path: str, target: int = SCHEMA_VERSION) -> None:
    """Apply the migrations the store lacks, each in its own write transaction.

    The version is read again inside the transaction, so two processes opening a fresh store at once apply
    each migration exactly once. `conn` must be in autocommit mode (isolation_level=None).
    """
    if conn.execute("PRAGMA user_version").fetchone()[0] == target:
        return  # up to date: readers never take the write lock
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise ServelabError(
                    f"{path}: results store schema version {version} is newer than this servelab knows "
                    f"({SCHEMA_VERSION}); upgrade servelab"
                )
            if version >= target:
                conn.execute("COMMIT")
                return
            for statement in MIGRATIONS[version].split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
