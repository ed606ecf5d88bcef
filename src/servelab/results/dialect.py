"""What differs between the store's two databases, SQLite (embedded, the default) and PostgreSQL (shared by
many machines): how a write transaction takes the store's one write lock, the upsert, where the schema
version lives, one column type and the order of rows inserted in one second. Everything else (the tables,
the migrations, every query) is one text for both, written with `?` placeholders.

Both take one write lock per store, so PostgreSQL keeps SQLite's guarantees: an import checks and writes
under the lock (a file imported by two processes at once is added once), and two processes migrating a
fresh store apply each migration once. The store's writes are few and small; the lock costs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

# the key of the PostgreSQL advisory lock (transaction-level) that stands for SQLite's write lock: a number
# of servelab's own, so that another application's advisory locks in the same database never meet it
WRITE_LOCK_KEY = 0x5E7E1AB


class Cursor(Protocol):
    """What the store reads of a cursor (sqlite3's, or psycopg's through results/postgres.py)."""

    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What the store uses of a connection: sqlite3's, or results/postgres.py's adapter of psycopg's."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Any: ...

    def executemany(self, sql: str, parameters: Any, /) -> Any: ...

    def close(self) -> None: ...


class Dialect:
    """SQLite's way; PostgreSQL's subclass says where it differs."""

    name = "sqlite"
    like = "LIKE"  # case-insensitive for ASCII in SQLite
    # BEGIN IMMEDIATE takes the write lock up front: two writers never deadlock on a lock upgrade
    begin: tuple[str, ...] = ("BEGIN IMMEDIATE",)

    def upsert(self, table: str, columns: Sequence[str], key: Sequence[str]) -> str:
        """Insert a row, replacing the one with the same key (one `?` per column, in the table's order)."""
        return f"INSERT OR REPLACE INTO {table} VALUES ({', '.join('?' * len(columns))})"

    def version(self, conn: Connection) -> int:
        """How many migrations the store has had."""
        return int(conn.execute("PRAGMA user_version").fetchone()[0])

    def prepare_version(self, conn: Connection) -> None:
        """Inside the migration's transaction, before the version is read again: nothing for SQLite."""

    def set_version(self, conn: Connection, version: int) -> None:
        conn.execute(f"PRAGMA user_version = {int(version)}")

    def statements(self, migration: str, index: int) -> list[str]:
        """The statements of migration `index` (0-based) as this database runs them."""
        return [s for s in migration.split(";") if s.strip()]


class PostgresDialect(Dialect):
    name = "postgresql"
    like = "ILIKE"  # as SQLite's LIKE: a run id prefix matches whatever its case
    begin = ("BEGIN", f"SELECT pg_advisory_xact_lock({WRITE_LOCK_KEY})")

    def upsert(self, table: str, columns: Sequence[str], key: Sequence[str]) -> str:
        update = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c not in key)
        return (
            f"INSERT INTO {table} VALUES ({', '.join('?' * len(columns))}) "
            f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {update}"
        )

    def version(self, conn: Connection) -> int:
        # no PRAGMA user_version: a one-row table, which a store not migrated yet lacks
        if conn.execute("SELECT to_regclass('servelab_schema')").fetchone()[0] is None:
            return 0
        row = conn.execute("SELECT version FROM servelab_schema").fetchone()
        return int(row[0]) if row else 0

    def prepare_version(self, conn: Connection) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS servelab_schema (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO servelab_schema SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM servelab_schema)")

    def set_version(self, conn: Connection, version: int) -> None:
        conn.execute("UPDATE servelab_schema SET version = ?", (int(version),))

    def statements(self, migration: str, index: int) -> list[str]:
        # SQLite's REAL is 8 bytes, PostgreSQL's 4: a metric keeps its double precision
        out = [re.sub(r"\bREAL\b", "DOUBLE PRECISION", s) for s in super().statements(migration, index)]
        if index == 0:
            # SQLite's implicit rowid orders the runs created in one second; PostgreSQL numbers them so
            out.append("ALTER TABLE runs ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY")
        return out


SQLITE = Dialect()
POSTGRES = PostgresDialect()
