"""Prices kept across processes: a PerfDB's resolved op-key answers, and the step parts and steps priced
from them, stored in files under the user's cache directory, so that a later process asking the same
questions of the same inputs reads the answers rather than computing them again (a fresh `servelab plan`
spent 0.26-0.39 s resolving 6,600 keys and more again building, summing and assembling step parts).

The store's name is a digest of everything the answers depend on: the bytes of every file under the
perf-table search path (tables, ratios, transfer fits, efficiencies), the source and data files of the
packages that compute a price (perfdb, engines, specs: the system and model specs among them, and
predict), servelab's version, and the PerfDB's system spec, backend, release and transfer
setting. Change any of them and the prices are computed (and kept) anew, never answered from the old store.
A store is a directory: its op answers in one file, and the parts and steps of each (model spec, parallel
layout[, engine profile]) pair, named by their digest, in a file each, read only when that pair is priced
(and the simulations of servelab.predict.serving.kept, in files of their own).

The files are written with marshal (the standard library's format for .pyc files): plain tuples, dicts,
floats, ints and strs go and come back exactly, float bits and dict order included, 2-3x faster than JSON,
and no code runs on reading (unlike pickle); what is read is checked before use. Where: prices/ in
servelab's cache directory (servelab.cachedir). A file is written whole under a temporary name and renamed;
writers take the directory's .lock and merge the file as it is with what they add, so two processes writing
at once lose nothing. Bounded: at most MAX_ENTRIES prices a file (beyond them new ones are not kept) and
MAX_BYTES in all (the least recently written files go first). A file that cannot be read is ignored (the
prices are computed again and the file rewritten). SERVELAB_PRICE_CACHE=0 turns it off.
"""

import atexit
import contextlib
import gc
import hashlib
import marshal
import os
import tempfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from servelab.cachedir import cache_root
from servelab.perfdb.keys import KEY_TYPES, OpKey
from servelab.perfdb.latency import OpLatency
from servelab.perfdb.ops import OpName
from servelab.perfdb.tables import ENV_PATH, data_root

try:
    import fcntl
except ImportError:  # not on Windows: writes there are atomic but not merged under a lock
    fcntl = None  # type: ignore[assignment]

FORMAT = 1  # bump when the files' layout changes
OPS = "ops"  # the file of a store's op answers (its pairs' files are named by the pair)
ENV_SWITCH = "SERVELAB_PRICE_CACHE"  # "0", "off", "no" or "false": no prices kept across processes
MAX_ENTRIES = 250_000  # prices kept in one file (the default plan keeps 21,000: 4 MB)
MAX_BYTES = 256 << 20  # the directory's files together: the least recently written go first beyond
# the packages (source and data files) and modules that compute a price: the whole of predict, not only its
# step pricing, so that no change to what feeds a step (graphs, memory, engine terms) is answered from an old
# store (a few hundred KB more to digest)
PRICED_PACKAGES = ("perfdb", "engines", "specs", "predict")
PRICED_MODULES = (
    "__init__.py",  # servelab's version
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
    """The kept prices of one PerfDB, a directory: its op answers in ops.prices and each pair's parts (or
    steps) in a file of their own, so that a process reads only the pairs it prices (a 72-GPU plan's
    aggregated and disaggregated pairs are 18 MB together). What an earlier process stored is read on first
    use, what this one adds is written at exit. Tags and values are tuples of plain values (a NamedTuple tag
    asks for the plain tuple stored: they compare and hash alike)."""

    def __init__(self, path: Path):
        self.path = path
        self._loaded: dict[str, dict] = {}  # section (ops or a pair) -> its entries as read
        self._new: dict[str, dict[tuple, tuple]] = {}  # section -> entries this process added

    # ---- reading ------------------------------------------------------------------------------------------
    def _section(self, name: str) -> dict:
        found = self._loaded.get(name)
        if found is None:
            found = self._loaded[name] = _read(self.path / f"{name}.prices")
        return found

    def ops(self) -> dict[OpKey, OpLatency]:
        """The op answers kept by earlier processes (none where the file is missing or unreadable; an entry
        of another layout is left out, its key resolved again)."""
        out: dict[OpKey, OpLatency] = {}
        for fields, answer in self._section(OPS).items():
            key = decode_key(fields)
            if key is not None and type(answer) is tuple and len(answer) == len(OpLatency._fields):
                out[key] = OpLatency._make(answer)
        return out

    def op(self, key: OpKey) -> OpLatency | None:
        """The answer an earlier process kept for one key, or None (none kept, or of another layout). Looked
        up by the key as the file keeps it: a warm plan asks for a few hundred of the thousands kept, which
        `ops` would all make into keys and answers (0.03-0.05 s)."""
        answer = self._section(OPS).get(encode_key(key))
        if type(answer) is tuple and len(answer) == len(OpLatency._fields):
            return OpLatency._make(answer)
        return None

    def parts(self, pair: str) -> dict[tuple, tuple]:
        """The parts of a pair (servelab.predict.step's parts and steps) kept by earlier processes, by tag."""
        return self._section(pair)

    # ---- adding -------------------------------------------------------------------------------------------
    def add_op(self, key: OpKey, answer: OpLatency) -> None:
        self._add(OPS, encode_key(key), tuple(answer))

    def add_part(self, pair: str, tag: tuple, value: tuple) -> None:
        """Keep a part: tag and value plain tuples (not NamedTuples: marshal writes exact types only) of
        ints, floats, strs, tuples and dicts of them; a value of another type leaves its file unwritten."""
        self._add(pair, tag, value)

    def _add(self, section: str, tag: tuple, value: tuple) -> None:
        new = self._new.get(section)
        if new is None:
            new = self._new[section] = {}
            if not _PENDING:
                atexit.register(save_all)
            _PENDING[self.path] = self
        new[tag] = value

    def save(self) -> None:
        """Merge what this process added into the files (under the cache directory's lock), then keep the
        directory bounded."""
        if not self._new:
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with _locked(self.path.parent / ".lock"):
                for section, new in self._new.items():
                    path = self.path / f"{section}.prices"
                    with contextlib.suppress(ValueError):  # a value marshal cannot write: this file unwritten
                        _write(path, _merged(_read(path), new))  # with what others wrote since
                _prune(self.path.parent)
            self._new.clear()
        except OSError:
            pass  # no cache here: the prices are computed every time


def _merged(kept: dict, new: dict) -> dict:
    """The entries kept with the new ones (a new one replaces an entry of the same tag, which was unreadable),
    MAX_ENTRIES at most."""
    if len(kept) + len(new) <= MAX_ENTRIES:
        kept.update(new)
        return kept
    room = MAX_ENTRIES - len(kept)
    for tag, value in new.items():
        if tag in kept or room > 0:
            room -= tag not in kept
            kept[tag] = value
    return kept


_PENDING: dict[Path, PriceStore] = {}  # the stores with answers to write at exit


def save_all() -> None:
    """Write what every store of this process added (at exit, or when a caller wants it on disk now)."""
    # the cyclic collector paused: what is written is thousands of small tuples, whose allocation would
    # otherwise start collections walking all of the process's objects (a plan's are hundreds of thousands)
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
    """A key as the file keeps it: its fields in order, the op last as a plain str (the key equals it)."""
    return (*key[:-1], str(key[-1]))


def decode_key(fields: Any) -> OpKey | None:
    """The key encode_key wrote, of its op's key type (the op back as an OpName); None where malformed."""
    try:
        cls, op = _KEY_TYPES[fields[-1]]
        return cls._make([*fields[:-1], op])
    except (TypeError, KeyError, IndexError):
        return None


_KEY_TYPES = {str(op): (KEY_TYPES.get(op), op) for op in OpName if op in KEY_TYPES}  # by the op's name


def store_for(identity: str) -> PriceStore | None:
    """The store of a PerfDB described by `identity` (its system spec, backend, release, transfer setting),
    or None where the cache is turned off."""
    if not enabled():
        return None
    h = hashlib.sha256(f"{FORMAT}\0{inputs_digest()}\0{identity}".encode())
    return PriceStore(cache_dir() / h.hexdigest()[:40])


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


def _read(path: Path) -> dict:
    """A file's entries, none where it is missing, unreadable, corrupt or of another layout."""
    try:
        found = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return {}  # the prices are computed again
    if not (isinstance(found, dict) and found.get("format") == FORMAT):
        return {}
    entries = found.get("entries")
    return entries if isinstance(entries, dict) else {}


def _write(path: Path, entries: dict) -> None:
    data = marshal.dumps({"format": FORMAT, "entries": entries})  # ValueError: a value it cannot write
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
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
    """Keep the most recently written files, MAX_BYTES of them at most (the newest always)."""
    sizes = []
    for path in directory.rglob("*.prices"):
        with contextlib.suppress(OSError):  # gone meanwhile (another process pruned it)
            stat = path.stat()
            sizes.append((stat.st_mtime_ns, stat.st_size, path))
    total = 0
    for _, size, path in sorted(sizes, reverse=True):
        total += size
        if total > MAX_BYTES and total > size:
            path.unlink(missing_ok=True)
