"""The paths a user names: a URL where a file was expected, an output that is also an input, a file that is
not a regular one (a FIFO never ends), JSON nested past what the parser can follow. Each is refused in one
line naming the option or file, before anything is read or written.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from servelab.errors import ServelabError
from servelab.redact import redact_text

# scheme:// or scheme:/ (pathlib folds the double slash); a one-letter scheme would be a drive letter
URL_LIKE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:/")
# the files SQLite keeps beside a database (write-ahead log, shared memory, rollback journal)
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
MAX_JSON_BYTES = 256 * 1024 * 1024  # a result or job file is KB to MB; a larger one is not one


def refuse_url(path: Path | str | None, field: str, what: str = "a file on this machine") -> None:
    """A URL given where a local path is expected would become a directory tree named after it."""
    if path is not None and URL_LIKE.match(str(path)):
        raise ServelabError(f"{redact_text(str(path))}: a URL; expected {what}", field=field)


def _same(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():  # symlinks followed, `..` and `.` folded
        return True
    try:
        return os.path.samefile(a, b)  # hard links
    except OSError:
        return False


def _linked_into(path: Path, folder: Path, limit: int = 100_000) -> bool:
    """Whether `path` is a hard link of a file under `folder` (checked only for files with several links)."""
    try:
        st = path.stat()
        if not folder.is_dir() or st.st_nlink < 2:
            return False
        for i, f in enumerate(folder.rglob("*")):
            if i >= limit:
                return False
            fs = f.stat()
            if (fs.st_dev, fs.st_ino) == (st.st_dev, st.st_ino):
                return True
    except OSError:
        return False
    return False


def _inside(path: Path, folder: Path) -> bool:
    try:
        return folder.is_dir() and path.resolve().is_relative_to(folder.resolve())
    except OSError:
        return False


InputPaths = Path | str | Iterable[Path | str] | None


def _paths(value: InputPaths) -> list[Path]:
    if value is None:
        return []
    if isinstance(value, Path | str):
        return [Path(value)]
    return [Path(v) for v in value if v is not None]


def refuse_overwriting_inputs(
    outputs: Mapping[str, Path | str | None],
    inputs: Mapping[str, InputPaths],
    *,
    stores: Mapping[str, Path | str | None] | None = None,
) -> None:
    """Refuse an output (option name -> path) that resolves to an input (option name -> paths), to another
    output, or to a results store or one of its SQLite side files: writing it would destroy what is read.
    An existing file inside an input folder counts as that folder's input."""
    given = {name: Path(p) for name, p in outputs.items() if p is not None and str(p) != "-"}
    files: list[tuple[str, Path]] = [(name, p) for name, v in inputs.items() for p in _paths(v)]
    for name, store in (stores or {}).items():
        if store is not None and not URL_LIKE.match(str(store)):  # a database server's store is no file
            files += [(name, Path(f"{store}{side}")) for side in ("", *SQLITE_SIDE_FILES)]
    for out_name, out in given.items():
        for in_name, src in files:
            if _same(out, src) or (out.is_file() and (_inside(out, src) or _linked_into(out, src))):
                raise ServelabError(
                    f"{out} is also the {in_name} input ({src}); writing it would destroy it: "
                    "choose another file",
                    field=out_name.lstrip("-").replace("-", "_"),
                )
    names = list(given)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if _same(given[a], given[b]):
                raise ServelabError(
                    f"{given[a]} is also the {b} output; one would overwrite the other",
                    field=a.lstrip("-").replace("-", "_"),
                )


def check_regular(path: Path, field: str | None = None) -> None:
    """Refuse a FIFO, socket or device where a file is read: reading a FIFO waits for a writer forever."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # missing or unreadable: the reader says so, naming the path
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise ServelabError(f"{path}: not a regular file (a pipe or a device); expected a file", field=field)


def read_bytes(path: Path, limit: int = MAX_JSON_BYTES, field: str | None = None) -> bytes:
    """A regular file's bytes, at most `limit` of them; one line naming the file otherwise."""
    check_regular(path, field)
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ServelabError(f"{path}: cannot read ({e.strerror or e})", field=field) from None
    if len(data) > limit:
        raise ServelabError(f"{path}: larger than {limit} bytes; not a file servelab reads", field=field)
    return data


def parse_json(data: bytes | str, source: str, expected: str = "JSON") -> Any:
    """JSON text as Python values; a ServelabError naming `source` when it is not JSON or is nested deeper
    than the parser's recursion can follow (which otherwise escapes as a RecursionError)."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ServelabError(f"{source}: nested too deeply; expected {expected}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ServelabError(f"{source}: not JSON ({e}); expected {expected}") from None


def read_json(path: Path, expected: str = "JSON", field: str | None = None) -> Any:
    return parse_json(read_bytes(path, field=field), str(path), expected)
