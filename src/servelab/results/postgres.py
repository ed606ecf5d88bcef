"""A PostgreSQL results store's connection, with the face the store uses of sqlite3's: `execute` and
`executemany` with `?` placeholders, `in_transaction`, rows read by index or by column name, and psycopg's
errors as one line that never holds the URL's credentials.

Loaded only for a `postgresql://` store (psycopg is the `[postgres]` extra): importing servelab, or any
command on an SQLite store, never imports psycopg.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from servelab.errors import ServelabError
from servelab.redact import redact_text
from servelab.results.faults import StoreUnavailable

CONNECT_TIMEOUT_S = 10
# a refusal at connection time that a retry will not cure: a wrong database, role, password or URL option
_CONFIG_FAULTS = ("does not exist", "authentication failed", "no pg_hba.conf entry", "invalid", "password")
_PASSING_FAULTS = ("starting up", "shutting down", "too many", "recovery")


class Row:
    """One row, by position (`row[0]`, unpacking) or by column name (`row["id"]`), as sqlite3.Row."""

    __slots__ = ("_names", "_values")

    def __init__(self, names: dict[str, int], values: Sequence[Any]) -> None:
        self._names, self._values = names, values

    def __getitem__(self, key: int | str) -> Any:
        return self._values[self._names[key] if isinstance(key, str) else key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list[str]:
        return list(self._names)


def _row_factory(cursor: Any) -> Any:
    names = {column.name: i for i, column in enumerate(cursor.description or ())}
    return lambda values: Row(names, values)


def _one_line(e: BaseException) -> str:
    """The error's first line (psycopg adds the server's DETAIL, HINT and context on the next ones)."""
    text = str(e).strip().splitlines()
    return redact_text(text[0].strip() if text else type(e).__name__)


def error(e: psycopg.Error, shown: str, connecting: bool = False) -> ServelabError:
    """What a psycopg error means to a servelab command: the store cannot be reached or written now (the
    server is down, busy past the lock timeout, full, read-only: exit 1; what was measured is kept in the
    run's journal), or the store or a value is wrong (exit 2)."""
    reason = _one_line(e)
    if connecting:
        wrong = any(f in reason for f in _CONFIG_FAULTS) and not any(f in reason for f in _PASSING_FAULTS)
        if wrong or not isinstance(e, psycopg.OperationalError):
            return ServelabError(f"{shown}: cannot open as a results store ({reason})", field="store")
        return StoreUnavailable(f"{shown}: the results store cannot be reached now ({reason})")
    if isinstance(e, psycopg.OperationalError | psycopg.errors.ReadOnlySqlTransaction):
        return StoreUnavailable(f"{shown}: the results store cannot be written now ({reason})")
    return ServelabError(f"{shown}: {reason}", field="store")


class Connection:
    """A psycopg connection in autocommit mode: the store opens and ends its transactions itself, as it
    does with sqlite3 (BEGIN, COMMIT and ROLLBACK are statements)."""

    def __init__(self, conn: psycopg.Connection[Any], shown: str) -> None:
        self.conn = conn
        self.shown = shown  # the URL without its credentials, for messages

    @property
    def in_transaction(self) -> bool:
        if self.conn.closed or self.conn.broken:
            return False  # nothing left to roll back: the server ended it with the connection
        return self.conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR)

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any:
        try:
            if not parameters:  # sent as it is (psycopg reads no placeholder then)
                return self.conn.execute(sql)  # type: ignore[call-overload]
            return self.conn.execute(_placeholders(sql), tuple(parameters))  # type: ignore[arg-type]
        except psycopg.Error as e:
            raise error(e, self.shown) from None

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Any:
        cursor = self.conn.cursor()
        try:
            cursor.executemany(_placeholders(sql), [tuple(p) for p in parameters])  # type: ignore[arg-type]
        except psycopg.Error as e:
            raise error(e, self.shown) from None
        return cursor

    def close(self) -> None:
        self.conn.close()


def _placeholders(sql: str) -> str:
    """SQLite's `?` as psycopg's `%s` (the store's SQL holds no `?` or `%` in a literal)."""
    return sql.replace("%", "%%").replace("?", "%s")


def connect(url: str, shown: str, lock_timeout_s: float) -> Connection:
    """Connect, in autocommit mode; a writer that waits for the store's write lock (or a row's) longer than
    `lock_timeout_s` gets StoreUnavailable, as a busy SQLite store does."""
    try:
        conn = psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            row_factory=_row_factory,
            prepare_threshold=None,  # no server-side prepared statements: a pooler may sit between
        )
    except psycopg.Error as e:
        raise error(e, shown, connecting=True) from None
    try:
        conn.execute(f"SET lock_timeout = {max(1, int(lock_timeout_s * 1000))}")
    except psycopg.Error as e:
        conn.close()
        raise error(e, shown) from None
    return Connection(conn, shown)
