"""What `--store` names: the path of an SQLite file (the embedded default), or a PostgreSQL server's URL
(`postgresql://user@host:port/db`, `postgres://` too) for a store that many machines share. Any other URL is
refused in one line; a URL never becomes a path, so it never becomes a directory on disk.
"""

from __future__ import annotations

import re
from pathlib import Path

from servelab.redact import redact_text
from servelab.userfiles import refuse_url

SERVER_SCHEMES = ("postgresql", "postgres")
# pathlib folds the `//` of a URL given as a Path (`postgresql:/u@h/db`): recognized, and given back
_SERVER_URL = re.compile(rf"({'|'.join(SERVER_SCHEMES)}):(/+)")
EXPECTED = "the path of an SQLite file, or a PostgreSQL URL (postgresql://user@host:port/database)"


def server_url(value: Path | str | None, field: str = "store") -> str | None:
    """The PostgreSQL URL `value` names, or None for a local path (or none); any other URL is refused."""
    if value is None:
        return None
    text = str(value)
    m = _SERVER_URL.match(text)
    if m:
        return text if len(m.group(2)) > 1 else f"{m.group(1)}://{text[m.end() :]}"
    refuse_url(text, field, EXPECTED)
    return None


def shown(url: str) -> str:
    """The URL as servelab prints and records it: no user, password or secret-looking query parameter."""
    return redact_text(url)
