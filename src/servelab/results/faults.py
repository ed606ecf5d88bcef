"""A results store that cannot be written now: which errors mean that, and the one error that says so.

Another writer holding the lock past the busy timeout, a full disk, a read-only file system or store: the run
that was writing is not at fault and what it measured is kept (results/journal.py); the command ends with one
line (exit 1), not an internal error.
"""

from __future__ import annotations

import errno
import sqlite3

from servelab.errors import ServelabError

# SQLite's messages for a store that cannot be written now (busy, full, read-only, I/O)
_SQLITE_REASONS = ("locked", "busy", "full", "readonly", "read-only", "disk i/o", "unable to open")
_OS_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


class StoreUnavailable(ServelabError):
    """The store cannot be written now; a run that failed (exit 1), not bad input."""

    exit_code = 1


def unavailable(e: BaseException, path: object) -> StoreUnavailable | None:
    """The StoreUnavailable an error of SQLite or the OS means, or None when it means something else."""
    if isinstance(e, sqlite3.OperationalError) and any(r in str(e).lower() for r in _SQLITE_REASONS):
        reason = str(e)
    elif isinstance(e, OSError) and e.errno in _OS_ERRNOS:
        reason = e.strerror or str(e)
    else:
        return None
    return StoreUnavailable(f"{path}: the results store cannot be written now ({reason})")
