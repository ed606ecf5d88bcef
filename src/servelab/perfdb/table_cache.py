"""Perf tables as read before: a table file's checked columns kept as a numpy .npz file under the user's
cache directory, keyed by the file's bytes, so that a later process reads the table without importing pyarrow
(about 40 ms of start-up) and without checking its rows again (they were checked when it was cached).

The key is a digest of the file's name and bytes, of the source of the reader and its checks (a servelab
that reads or checks tables otherwise caches anew) and CACHE_FORMAT: a table that changes in any way is read
and checked anew, never answered from the cache. Only tables that passed the
strict reader are kept; a cache entry that cannot be read is read again from its table. Where the cache
directory cannot be written the tables are read as they were, every time.

Where: tables/ in servelab's cache directory: $SERVELAB_CACHE_DIR, else $XDG_CACHE_HOME/servelab, else
~/.cache/servelab (as servelab.recipes.capture.cache finds it for launch captures).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from servelab.cachedir import cache_root
from servelab.perfdb import families, keys, table_files
from servelab.perfdb.families import BY_NAME
from servelab.perfdb.table_files import TableData, read_table

if TYPE_CHECKING:  # numpy imported when first used (servelab.lazy_numpy says why)
    import numpy as np
else:
    from servelab.lazy_numpy import np

CACHE_FORMAT = 1  # bump when TableData or the checks read_table makes change
STATS = ("latency_us", "p10_us", "p90_us", "reps", "campaign")


def cache_dir() -> Path:
    """Where read tables are kept."""
    return cache_root() / "tables"


def cached_read(path: Path) -> TableData:
    """read_table(path), from the cache when this file's bytes were read and checked before."""
    where = cache_dir()
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return read_table(path)  # which says what is wrong with the file
    entry = where / f"{_digest(Path(path).stem, raw)}.npz"
    found = _load(entry, Path(path))
    if found is not None:
        return found
    data = read_table(path)
    _store(entry, data)
    return data


def _digest(stem: str, raw: bytes) -> str:
    head = f"{CACHE_FORMAT}\0{_reader_digest()}\0{stem}\0".encode()
    return hashlib.sha256(head + raw).hexdigest()[:40]


@cache
def _reader_digest() -> str:
    """A digest of the modules that read and check a table file (empty where their source is not at hand)."""
    h = hashlib.sha256()
    for module in (table_files, families, keys):
        try:
            h.update(Path(module.__file__ or "").read_bytes())
        except OSError:
            pass
    return h.hexdigest()


def _load(entry: Path, path: Path) -> TableData | None:
    family = BY_NAME.get(path.stem)
    if family is None or not entry.is_file():
        return None
    try:
        with np.load(entry, allow_pickle=False) as z:
            arrays = {name: z[name] for name in z.files}
        return TableData(
            family,
            {f: arrays[f"col_{f}"] for f in family.fields},
            arrays["latency_us"],
            arrays["p10_us"],
            arrays["p90_us"],
            arrays["reps"],
            arrays["campaign"],
            json.loads(arrays["meta"].item()),
            json.loads(arrays["extra"].item()),
            path,
            arrays.get("measured"),
        )
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None  # unreadable or of another layout: read the table itself


def _store(entry: Path, data: TableData) -> None:
    arrays = {f"col_{f}": a for f, a in data.cols.items()}
    arrays |= {s: getattr(data, s) for s in STATS}
    arrays["meta"] = np.array(json.dumps(data.meta))
    arrays["extra"] = np.array(json.dumps(data.extra))
    if data.measured is not None:
        arrays["measured"] = data.measured
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        # written whole under a temporary name, then renamed: a reader never sees half an entry
        fd, tmp = tempfile.mkstemp(dir=entry.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stub types the first keyword
            os.replace(tmp, entry)
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError:
        pass  # no cache here: the table is read from its file every time
