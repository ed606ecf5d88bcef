"""Perf tables of one system / backend / version, answering op keys with a source and an error band.

A query resolves, in order: exact hit (measured; band = the measurement's p10-p90 widened to run-to-run
repeatability), interpolation between collected points (band = the table's leave-one-out error quantiles),
held utilisation beyond the data (extrapolated; band from leave-boundary-out errors, widened with the
distance), borrowing from the nearest collected shape (another (n, k), other heads, or another model's bucket,
which the note says), and, where the table has nothing, the roofline (PerfDB's fallback).

Files are found at construction (a directory listing) and read on the first query of their family, so a
process that never asks for MoE never reads the MoE table. A malformed or corrupt file is skipped with a
warning and the roofline answers for its ops, saying which file was skipped and why.
"""

import json
import logging
import math
import os
import re
from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from servelab.errors import ServelabError
from servelab.perfdb.families import BY_NAME, BY_OP
from servelab.perfdb.interpolate import Index
from servelab.perfdb.latency import OpLatency
from servelab.perfdb.reference import reference_fn
from servelab.perfdb.roofline import Roofline
from servelab.perfdb.table_cache import cached_read
from servelab.readable import factor

log = logging.getLogger("servelab.perfdb")

# run-to-run repeatability of one op measured twice on the H200 (90 % of rows within it); compute
# ops in the repeat campaign campaigns/h200_sxm_repeat agree with it (DSv4/MLA modules within -2.6 %..+2.8 %),
# collectives do not: small NCCL messages jitter, p10-p90 of repeat / first was -18 %..+20 % there
REPEAT_LO, REPEAT_HI = -0.025, 0.035
REPEAT_BY_FAMILY = {"comm": (-0.18, 0.20)}
# bands where a table has too few points for leave-one-out statistics: wide, and the note says so
DEFAULT_BANDS = {"interpolated": (-0.10, 0.10), "extrapolated": (-0.30, 0.30), "borrowed": (-0.30, 0.50)}
# rows the collector modelled rather than measured (collectives at GPU counts it did not have): no
# leave-one-out truth exists for them, so a fixed wide band, and the source says extrapolated
MODELLED_BAND = (-0.25, 0.25)
MIN_LOO_POINTS = 5
MEMO_ENTRIES = 1 << 16  # answers a table set keeps (a plan asks for ~20,000 keys); all dropped beyond
ENV_PATH = "SERVELAB_PERFDB_PATH"
DEFAULT_BACKEND = "torch"  # the backend whose tables time servelab's own kernels


@lru_cache(maxsize=32)
def system_rooflines(system) -> tuple[Roofline, Callable]:
    """The roofline and the interpolation reference of a system (frozen: equal specs price alike), one pair
    shared by all its table sets, so that each key's roofline is computed once (Roofline keeps its
    answers)."""
    return Roofline(system), reference_fn(system)


def data_root() -> Path:
    return Path(str(resources.files("servelab.perfdb") / "data"))


class TableSet:
    """The tables in one <system>/<backend>/<version> directory."""

    def __init__(self, directory: Path, system, strict: bool = False):
        self.dir = Path(directory)
        self.system = system
        self.strict = strict
        self.roofline, self._ref = system_rooflines(system)
        parts = self.dir.resolve().parts
        self.label = "/".join(parts[-3:]) if len(parts) >= 3 else str(self.dir)
        self.files: dict[str, Path] = {}
        self.skipped: dict[str, str] = {}  # family -> why its file was skipped
        self._indexes: dict[str, Index | None] = {}
        # (key, borrow) -> lookup's answer (a roofline answer: _NoRow until a caller takes it)
        self._answers: dict[tuple, Any] = {}
        if not self.dir.is_dir():
            raise ServelabError(f"{self.dir}: no such table directory")
        for path in sorted(self.dir.glob("*.parquet")):
            if path.stem in BY_NAME:
                self.files[path.stem] = path
            else:
                self._skip(path.stem, path, f"unknown table name; expected one of {', '.join(BY_NAME)}")

    def _skip(self, name: str, path: Path, why: str) -> None:
        if self.strict:
            raise ServelabError(f"{path}: {why}")
        self.skipped[name] = f"{path.name} skipped: {why}"
        log.warning("warning: perf table %s skipped, the roofline answers its ops: %s", path, why)

    @property
    def read_families(self) -> set[str]:
        """The families whose file has been read (or found missing) so far."""
        return set(self._indexes)

    def index(self, family: str) -> Index | None:
        """The family's index, reading its file on first use; None without a (valid) file."""
        if family in self._indexes:
            return self._indexes[family]
        idx = None
        path = self.files.get(family)
        if path is not None:
            try:
                data = cached_read(path)
            except ServelabError as e:
                if self.strict:
                    raise
                msg = str(e)
                prefix = f"{path}: "
                self._skip(family, path, msg.removeprefix(prefix))
            else:
                idx = Index(data, self._ref)
        self._indexes[family] = idx
        return idx

    # ---- queries -----------------------------------------------------------------------------------------
    def lookup(self, key, borrow: bool = True, roofline: bool = True) -> OpLatency | None:
        """The table's answer for key; the roofline, with a note saying why, where the family's table has no
        row of the key's exact group (and, with `borrow` off, where only another shape's rows could answer);
        None where this set has no table of the key's family. Memoized: a PerfDB asks a set for the same key
        several times (with and without borrowing, for itself and for systems it transfers to). With
        `roofline` off, None in place of a roofline answer not yet made: a caller that takes table answers
        only (another system's tables carried over, the torch tables scaled) does not pay for the roofline
        and its note."""
        memo = (key, borrow)
        found = self._answers.get(memo, _UNASKED)
        if found is _UNASKED:
            if len(self._answers) >= MEMO_ENTRIES:
                self._answers.clear()
            found = self._answers[memo] = self._lookup(key, borrow)
        if type(found) is _NoRow:
            if not roofline:
                return None
            found = self._answers[memo] = self._roofline(key, found.reason(self, key))
        return found

    def _lookup(self, key, borrow: bool) -> "OpLatency | _NoRow | None":
        fam = BY_OP.get(key.op)
        if fam is None:
            return None
        idx = self.index(fam.name)
        if idx is None:
            if fam.name in self.skipped:
                return _NoRow(_skipped_why, fam)
            return None
        ans = idx.answer(key)
        if ans is not None and ans.borrowed_from is not None and not borrow:
            return _NoRow(_other_shapes_why, fam)
        if ans is None:
            return _NoRow(_no_rows_why, fam)
        where = f"{self.label} {fam.name} table"
        acc = idx.data.meta.get("accuracy") or {}
        if ans.kind == "measured":
            d = idx.data
            lat, p10, p90 = float(d.latency_us[ans.row]), float(d.p10_us[ans.row]), float(d.p90_us[ans.row])
            rep_lo, rep_hi = REPEAT_BY_FAMILY.get(fam.name, (REPEAT_LO, REPEAT_HI))
            low = min(p10, lat * (1 + rep_lo))
            high = max(p90, lat * (1 + rep_hi))
            return OpLatency(
                lat, low, high, "measured", f"{where}; band: measured p10-p90 and run-to-run repeatability"
            )
        if ans.kind == "modelled":
            how = _modelled_from(idx, ans.row)
            lo, hi = MODELLED_BAND
            return OpLatency(
                ans.us,
                ans.us * (1 + lo),
                ans.us * (1 + hi),
                "extrapolated",
                f"{where}; from rows the collector modelled, not measured{how}; band: fixed "
                f"{100 * lo:+.0f} %/{100 * hi:+.0f} % for modelled rows",
            )
        note = where
        kind = ans.kind
        if ans.borrowed_from is not None:
            kind = "borrowed"
            gq = idx.family.group
            query_group = tuple(getattr(key, f) for f in gq)
            if idx.family.buckets:
                note += (
                    f"; fell back from model bucket {idx.describe_group(query_group)} (not collected) to "
                    f"bucket {idx.describe_group(ans.borrowed_from)}"
                )
            else:
                note += (
                    f"; {idx.describe_group(query_group)} not collected, utilisation borrowed from "
                    f"{idx.describe_group(ans.borrowed_from)}"
                )
        lo, hi, band_note = _band(acc, kind)
        if ans.kind == "extrapolated":
            # one grid step beyond the data is what leave-boundary-out measured; further out, widen with the
            # distance (log2 of how far beyond the data the query lies)
            if kind != "extrapolated":
                lo2, hi2, _ = _band(acc, "extrapolated")
                lo, hi = min(lo, lo2), max(hi, hi2)
            scale = max(1.0, math.log2(ans.beyond))
            lo, hi = lo * scale, hi * scale
            note += f"; utilisation held from the table boundary ({factor(ans.beyond)}x beyond the data)"
        # the table's own values carry run-to-run noise, so no band is narrower than the repeatability
        lo, hi = max(min(lo, REPEAT_LO), -0.9), max(hi, REPEAT_HI)
        return OpLatency(ans.us, ans.us * (1 + lo), ans.us * (1 + hi), ans.kind, f"{note}; {band_note}")

    def _roofline(self, key, why: str) -> OpLatency:
        r = self.roofline.latency(key)
        return r._replace(note=f"{r.note} ({why})")

    # ---- description -------------------------------------------------------------------------------------
    def describe(self) -> dict:
        """Per table: rows, groups, provenance and stored accuracy (reads every file)."""
        tables: dict[str, dict] = {}
        out = {"dir": str(self.dir), "label": self.label, "tables": tables, "skipped": {}}
        for name in self.files:
            idx = self.index(name)
            if idx is None:
                continue
            meta = idx.data.meta
            tables[name] = {
                "rows": len(idx.data),
                "groups": len(idx.groups),
                "ops": sorted(set(idx.data.cols["op"].tolist())),
                "provenance": meta.get("provenance"),
                "accuracy": meta.get("accuracy"),
                "merged": meta.get("merged"),
            }
        out["skipped"] = dict(self.skipped)
        return out


_UNASKED = object()  # a key not yet asked of a table set (None is an answer: no table of its family)


class _NoRow(NamedTuple):
    """No row of the set answers the key: the roofline does, with a note saying why, made only when a caller
    takes a roofline answer (lookup's `roofline`)."""

    why: Callable[[Any, Any, Any], str]  # (table set, key, family) -> the note's reason
    family: Any

    def reason(self, tables: "TableSet", key) -> str:
        return self.why(tables, key, self.family)


def _skipped_why(tables: "TableSet", key, fam) -> str:
    return tables.skipped[fam.name]


def _other_shapes_why(tables: "TableSet", key, fam) -> str:
    return f"{fam.name} rows of {tables.label} hold other shapes only"


def _no_rows_why(tables: "TableSet", key, fam) -> str:
    hard = [f for f in fam.group if f not in fam.soft]
    return f"no {fam.name} rows in {tables.label} for " + ", ".join(f"{f}={getattr(key, f)}" for f in hard)


def _modelled_from(idx, row: int) -> str:
    """The collector's own account of how a modelled row was made (its `modelled_from` extra)."""
    extra = idx.data.extra
    if extra is None:
        return ""
    try:
        how = json.loads(extra[row] or "{}").get("modelled_from")
    except ValueError:
        how = None
    return f" (e.g. {how})" if how else ""


def _band(acc: dict, kind: str) -> tuple[float, float, str]:
    s = acc.get(kind) or {}
    if s.get("n", 0) >= MIN_LOO_POINTS:
        return (
            min(s["lo"], 0.0),
            max(s["hi"], 0.0),
            f"band: leave-one-out p10-p90 of {kind} points (n={s['n']})",
        )
    lo, hi = DEFAULT_BANDS[kind]
    return lo, hi, f"band: default for {kind} (too few leave-one-out points)"


def _version_key(text: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def table_dirs(system_name: str, roots: list[Path] | None = None, backend: str | None = None) -> list[Path]:
    """Table directories for a system under each root (<root>/<system>/<backend>/<version>/), best first:
    roots in order (SERVELAB_PERFDB_PATH before the embedded data), then torch's tables before an engine's
    (an engine's tables time only the kernels collected with it, so they are never the system's default),
    then the newest version. With `backend`, only tables collected with that backend."""
    if roots is None:
        roots = [Path(p) for p in os.environ.get(ENV_PATH, "").split(os.pathsep) if p] + [data_root()]
    found = []
    for root in roots:
        base = root / system_name
        if not base.is_dir():
            continue
        dirs = [
            v
            for b in sorted(base.iterdir())
            if b.is_dir() and backend in (None, b.name)
            for v in b.iterdir()
            if v.is_dir() and any(v.glob("*.parquet"))
        ]
        found += sorted(
            dirs,
            key=lambda v: (v.parent.name == DEFAULT_BACKEND, _version_key(v.name), v.parent.name),
            reverse=True,
        )
    return found


def tables_with_data(roots: list[Path] | None = None) -> list[str]:
    """The systems that have at least one table directory, by name."""
    if roots is None:
        roots = [Path(p) for p in os.environ.get(ENV_PATH, "").split(os.pathsep) if p] + [data_root()]
    names = {s.name for root in roots if root.is_dir() for s in root.iterdir() if s.is_dir()}
    return sorted(n for n in names if table_dirs(n, roots))


def load_default_tables(system, backend: str | None = None) -> TableSet | None:
    """The best table directory for this system (and backend, when given; see table_dirs), or None; files are
    read on first query."""
    dirs = table_dirs(system.name, backend=backend)
    return TableSet(dirs[0], system) if dirs else None


def load_tables(directory: str | Path, system, strict: bool = False) -> TableSet:
    """The tables of a directory the user named: one without any table file is a mistake (a wrong path), not
    a request for the roofline."""
    tables = TableSet(Path(directory), system, strict=strict)
    if not tables.files and not tables.skipped:
        raise ServelabError(f"{directory}: no perf tables (*.parquet) in this directory", field="tables")
    return tables
