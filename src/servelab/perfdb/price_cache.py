"""Prices kept across processes: a PerfDB's resolved op-key answers, and the step parts priced from them,
stored in a JSON file under the user's cache directory, so that a later process asking the same questions of
the same inputs reads the answers rather than resolving thousands of keys again (a fresh `servelab plan`
spent 0.26-0.39 s resolving 6,600 keys and about as much building and summing the op lists of step parts).

The file's name is a digest of everything the answers depend on: the bytes of every file under the perf-table
search path (tables, ratios, transfer fits, efficiencies), the source and data files of the packages that
compute a price (perfdb, engines, specs: the system and model specs among them) and of predict's step
pricing, servelab's version, and the PerfDB's system spec, backend, release and transfer setting. Change any
of them and the prices are computed (and kept) anew, never answered from the old file. A step part is kept
under the digest of its model spec and parallel layout.

Where: prices/ in servelab's cache directory (servelab.cachedir). A file is written whole under a temporary
name and renamed; writers take the directory's .lock and merge the file as it is with what they add, so two
processes writing at once lose nothing. Bounded: at most MAX_ENTRIES prices a file (beyond them new ones are
not kept) and MAX_FILES files (the least recently written go first). A file that cannot be read or parsed is
ignored (the prices are computed again and the file rewritten). SERVELAB_PRICE_CACHE=0 turns it off.
"""

import atexit
import contextlib
import gc
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from servelab import __version__
from servelab.cachedir import cache_root
from servelab.perfdb.keys import KEY_TYPES, OpKey
from servelab.perfdb.latency import OpLatency
from servelab.perfdb.ops import OpName
from servelab.perfdb.tables import ENV_PATH, data_root

try:
    import fcntl
except ImportError:  # not on Windows: writes there are atomic but not merged under a lock
    fcntl = None  # type: ignore[assignment]

FORMAT = 1  # bump when the file's layout changes
ENV_SWITCH = "SERVELAB_PRICE_CACHE"  # "0", "off", "no" or "false": no prices kept across processes
MAX_ENTRIES = 1_000_000  # answers and parts kept in one file (a default plan keeps about 13,000: 3 MB)
MAX_FILES = 32  # files kept in the directory, the most recently written
# the packages (source and data files) and modules that compute a price
PRICED_PACKAGES = ("perfdb", "engines", "specs")
PRICED_MODULES = (
    "__init__.py",
    "predict/graph.py",
    "predict/step.py",
    "readable.py",
    "registry.py",
    "errors.py",
)


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "").strip().lower() not in ("0", "off", "no", "false")


def cache_dir() -> Path:
    """Where the prices are kept."""
    return cache_root() / "prices"


class PriceStore:
    """The kept prices of one PerfDB: what an earlier process stored (read on first use) and what this one
    adds (written at exit)."""

    def __init__(self, path: Path):
        self.path = path
        self._loaded: dict[str, Any] | None = None
        self._new_ops: dict[OpKey, OpLatency] = {}
        self._new_parts: dict[str, dict[str, list]] = {}

    # ---- reading ------------------------------------------------------------------------------------------
    def _file(self) -> dict[str, Any]:
        if self._loaded is None:
            self._loaded = _read(self.path)
        return self._loaded

    def ops(self) -> dict[OpKey, OpLatency]:
        """The op answers kept by earlier processes (none where the file is missing or unreadable; an entry
        of another layout is left out, its key resolved again)."""
        out: dict[OpKey, OpLatency] = {}
        for entry in _list(self._file().get("ops")):
            found = _decoded(entry)
            if found is not None:
                out[found[0]] = found[1]
        return out

    def parts(self, pair: str) -> dict[str, list]:
        """The step parts of a (model, parallel) pair kept by earlier processes, by part tag."""
        parts = self._file().get("parts")
        found = parts.get(pair) if isinstance(parts, dict) else None
        return found if isinstance(found, dict) else {}

    # ---- adding -------------------------------------------------------------------------------------------
    def add_op(self, key: OpKey, answer: OpLatency) -> None:
        self._new_ops[key] = answer
        self._at_exit()

    def add_part(self, pair: str, tag: str, value: list) -> None:
        self._new_parts.setdefault(pair, {})[tag] = value
        self._at_exit()

    def _at_exit(self) -> None:
        if not _PENDING:
            atexit.register(save_all)
        _PENDING[self.path] = self

    def save(self) -> None:
        """Merge what this process added into the file (under the directory's lock), then keep the directory
        bounded."""
        if not self._new_ops and not self._new_parts:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with _locked(self.path.parent / ".lock"):
                ops, parts = _entries(_read(self.path))  # with what other processes wrote since
                room = MAX_ENTRIES - len(ops) - sum(len(p) for p in parts.values())
                for key, answer in self._new_ops.items():
                    fields = encode_key(key)
                    if fields in ops or room > 0:
                        room -= fields not in ops
                        ops[fields] = list(answer)
                for pair, tags in self._new_parts.items():
                    mine = parts.setdefault(pair, {})
                    for tag, value in tags.items():
                        if tag in mine or room > 0:  # one priced again (its entry was unreadable) replaces it
                            room -= tag not in mine
                            mine[tag] = value
                content = {"format": FORMAT, "ops": [[list(k), v] for k, v in ops.items()], "parts": parts}
                _write(self.path, content)
                _prune(self.path.parent)
            self._new_ops.clear()
            self._new_parts.clear()
        except OSError:
            pass  # no cache here: the prices are computed every time


def _entries(kept: dict[str, Any]) -> tuple[dict[tuple, list], dict[str, dict[str, list]]]:
    """A file's op answers by encoded key (those of another layout left out) and its parts by pair."""
    ops = {tuple(e[0]): e[1] for e in _list(kept.get("ops")) if _decoded(e) is not None}
    parts = kept.get("parts")
    if not isinstance(parts, dict):
        return ops, {}
    return ops, {pair: tags for pair, tags in parts.items() if isinstance(tags, dict)}


def _list(found: Any) -> list:
    return found if isinstance(found, list) else []


def _decoded(entry: Any) -> tuple[OpKey, OpLatency] | None:
    """An [encoded key, answer] entry of the file as a key and its answer; None where malformed."""
    try:
        fields, (us, low, high, source, note) = entry
        if not (isinstance(fields, list) and isinstance(source, str) and isinstance(note, str)):
            return None
        if not all(isinstance(x, float) for x in (us, low, high)):
            return None
        return decode_key(fields), OpLatency(us, low, high, source, note)
    except (TypeError, ValueError, KeyError, IndexError):
        return None


_PENDING: dict[Path, PriceStore] = {}  # the stores with answers to write at exit


def save_all() -> None:
    """Write what every store of this process added (at exit, or when a caller wants it on disk now)."""
    # the cyclic collector paused: what is written is thousands of small lists, whose allocation would
    # otherwise start collections walking all of the process's objects (a plan's are hundreds of thousands:
    # they took 0.3 s of a 0.05 s write)
    enabled = gc.isenabled()
    gc.disable()
    try:
        for store in list(_PENDING.values()):
            store.save()
        _PENDING.clear()
    finally:
        if enabled:
            gc.enable()


def encode_key(key: OpKey) -> tuple:
    """A key as the file keeps it: its fields in order, the op last (an OpName is a str: JSON writes its
    name, and the key equals the tuple read back)."""
    return tuple(key)


def decode_key(fields: list) -> OpKey:
    """The key encode_key wrote, of its op's key type (the op back as an OpName)."""
    cls, op = _KEY_TYPES[fields[-1]]
    return cls._make([*fields[:-1], op])


_KEY_TYPES = {str(op): (KEY_TYPES.get(op), op) for op in OpName if op in KEY_TYPES}  # by the op's name


def store_for(identity: str) -> PriceStore | None:
    """The store of a PerfDB described by `identity` (its system spec, backend, release, transfer setting),
    or None where the cache is turned off."""
    if not enabled():
        return None
    h = hashlib.sha256(f"{FORMAT}\0{__version__}\0{inputs_digest()}\0{identity}".encode())
    return PriceStore(cache_dir() / f"{h.hexdigest()[:40]}.json")


def pair_digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def inputs_digest() -> str:
    """A digest of the source that computes prices and of the data files it reads (see the module
    docstring); computed once a process and search path (a few ms; forget() computes it again)."""
    return _inputs_digest(os.environ.get(ENV_PATH, ""))


def forget() -> None:
    """Digest the inputs again on next use (after tables changed in place)."""
    _inputs_digest.cache_clear()


@cache
def _inputs_digest(search_path: str) -> str:
    package = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    sources = [p for name in PRICED_PACKAGES for p in sorted((package / name).rglob("*")) if _kept(p)]
    sources += [package / m for m in PRICED_MODULES]
    roots = [Path(p) for p in search_path.split(os.pathsep) if p] + [data_root()]
    data = [p for root in roots if root.is_dir() for p in sorted(root.rglob("*")) if _kept(p)]
    for path in sources + data:
        h.update(f"\0{path}\0".encode())
        with contextlib.suppress(OSError):
            h.update(path.read_bytes())
    return h.hexdigest()


def _kept(path: Path) -> bool:
    return path.is_file() and "__pycache__" not in path.parts


def _read(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}  # missing, unreadable or corrupt: the prices are computed again
    return found if isinstance(found, dict) and found.get("format") == FORMAT else {}


def _write(path: Path, content: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(content, separators=(",", ":")))
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    with open(lock, "a") as f:
        if fcntl is not None:
            fcntl.flock(f, fcntl.LOCK_EX)
        yield  # the lock goes with the file's closing


def _prune(directory: Path) -> None:
    """Keep the MAX_FILES most recently written files."""
    files = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in files[MAX_FILES:]:
        old.unlink(missing_ok=True)
