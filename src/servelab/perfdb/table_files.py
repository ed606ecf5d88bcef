"""Perf table files: one Parquet file per op family, provenance and accuracy in the schema metadata.

Layout: <root>/<system>/<backend>/<version>/<family>.parquet. Columns: the key fields of the family's op key
(rank-local shapes plus native heads where models could collide), then latency_us (median), p10_us, p90_us,
reps, campaign (index into the provenance list) and an optional extra (JSON per row: SDPA backend, routing,
...).

The loader is strict: metadata of the wrong shape (TableMeta: a list where an object belongs, a string for
a count, a missing provenance field), a column of the wrong type, or a row that breaks an invariant (a head
count that does not divide, p10 above the median, a duplicate key, ...) rejects the whole file with a message
naming the file and the field, row or rule.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    JsonValue,
    StrictInt,
    ValidationError,
)

from servelab.errors import ServelabError
from servelab.perfdb.families import BY_NAME, Family
from servelab.perfdb.keys import ZERO_OK

if TYPE_CHECKING:  # numpy imported when first used (servelab.lazy_numpy says why)
    import numpy as np
else:
    from servelab.lazy_numpy import np

FORMAT_VERSION = 1
META_KEY = b"servelab"
LOCK_NAME = ".lock"  # in each table directory; outside the loader's *.parquet glob
PROVENANCE_FIELDS = ("gpu_name", "driver", "cuda", "torch", "date", "clocks", "command")
DTYPES = ("bf16", "fp16", "fp8", "fp8_block", "fp4", "mxfp4", "nvfp4")
STAT_COLUMNS = ("latency_us", "p10_us", "p90_us", "reps", "campaign")


def _stated(value: JsonValue) -> JsonValue:
    if value is None or value in ("", [], {}):
        raise ValueError("must be stated (not null or empty)")
    return value


Stated = Annotated[JsonValue, AfterValidator(_stated)]


class Provenance(BaseModel):
    """Where one campaign's rows came from; the collector's other facts (env, runs, ...) ride along."""

    model_config = ConfigDict(extra="allow")
    gpu_name: str
    date: str
    command: Stated  # a string, or the argv list
    driver: Stated
    cuda: Stated
    torch: Stated
    clocks: Stated  # a description, or nvidia-smi records per GPU


class LooStats(BaseModel):
    """Leave-one-out figures of one kind (perfdb.accuracy.summarize); the figures exist when n > 0."""

    model_config = ConfigDict(extra="forbid")
    n: StrictInt = Field(ge=0)
    median: FiniteFloat | None = Field(None, ge=0)
    p90: FiniteFloat | None = Field(None, ge=0)
    lo: FiniteFloat | None = None
    hi: FiniteFloat | None = None

    def model_post_init(self, _context) -> None:
        missing = [f for f in ("median", "p90", "lo", "hi") if self.n and getattr(self, f) is None]
        if missing:
            raise ValueError(f"n={self.n} needs {', '.join(missing)}")


class Accuracy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    interpolated: LooStats | None = None
    extrapolated: LooStats | None = None
    borrowed: LooStats | None = None


class MergeRecord(BaseModel):
    """What the merge that wrote the table says about itself."""

    model_config = ConfigDict(extra="allow")
    date: str | None = None
    command: str | None = None
    replaced_by_newer: StrictInt | None = Field(None, ge=0)
    rows: StrictInt | None = Field(None, ge=0)
    interpolation_reference: str | None = None


class TableMeta(BaseModel):
    """The servelab metadata of a table file: the one checker every reader goes through."""

    model_config = ConfigDict(extra="allow")
    format: StrictInt
    family: str
    provenance: list[Provenance] = Field(min_length=1)
    accuracy: Accuracy | None = None
    merged: MergeRecord | None = None
    system: str | None = None
    backend: str | None = None
    version: str | None = None


@dataclass
class TableData:
    """One family's rows as column arrays (ints int64, strings numpy unicode), plus its metadata."""

    family: Family
    cols: dict[str, np.ndarray]
    latency_us: np.ndarray
    p10_us: np.ndarray
    p90_us: np.ndarray
    reps: np.ndarray
    campaign: np.ndarray
    meta: dict = field(default_factory=dict)
    extra: list | None = None  # JSON strings per row, or None
    path: Path | None = None
    measured: np.ndarray | None = (
        None  # False where the collector modelled the row (e.g. a GPU count it lacked)
    )

    def is_measured(self, i: int) -> bool:
        return self.measured is None or bool(self.measured[i])

    def __len__(self) -> int:
        return len(self.latency_us)

    def row_key(self, i: int) -> tuple:
        """The op key of row i (a plain tuple in key field order; equal to the NamedTuple key)."""
        return tuple(self.cols[f][i].item() for f in self.family.fields)

    def describe_row(self, i: int) -> str:
        return ", ".join(f"{f}={self.cols[f][i]}" for f in self.family.fields)


def write_table(path: Path, data: TableData) -> None:
    import pyarrow as pa  # noqa: PLC0415 - pyarrow costs start-up time; only merges write
    import pyarrow.parquet as pq  # noqa: PLC0415

    arrays, names = [], []
    for f in data.family.fields:
        col = data.cols[f]
        arrays.append(pa.array(col.tolist(), type=pa.string() if col.dtype.kind == "U" else pa.int64()))
        names.append(f)
    arrays += [
        pa.array(data.latency_us, pa.float64()),
        pa.array(data.p10_us, pa.float64()),
        pa.array(data.p90_us, pa.float64()),
        pa.array(data.reps, pa.int32()),
        pa.array(data.campaign, pa.int16()),
    ]
    names += list(STAT_COLUMNS)
    if data.extra is not None:
        arrays.append(pa.array(data.extra, pa.string()))
        names.append("extra")
    if data.measured is not None and not data.measured.all():
        arrays.append(pa.array(data.measured.astype(bool), pa.bool_()))
        names.append("measured")
    meta = dict(data.meta, format=FORMAT_VERSION, family=data.family.name)
    table = pa.Table.from_arrays(arrays, names=names).replace_schema_metadata({META_KEY: json.dumps(meta)})
    path.parent.mkdir(parents=True, exist_ok=True)
    # a temporary name of this writer's own, outside the loader's *.parquet glob, then one rename: a reader
    # sees the old table or the new one, never half of one
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def locked_dir(directory: Path) -> Iterator[None]:
    """Hold the table directory's lock (created with the directory): one writer at a time reads, merges and
    writes its tables, so concurrent merges never lose each other's rows."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise ServelabError(f"{directory}: cannot open for writing ({e.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits for the writer that holds it
        yield
    finally:
        os.close(fd)  # closing releases the lock


def read_meta(path: Path) -> dict:
    """Only the metadata (cheap: reads the footer)."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - pyarrow costs start-up time; imported on first read

    try:
        schema = pq.read_schema(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a corrupt footer
        raise ServelabError(f"{path}: not a readable Parquet file ({e.__class__.__name__}: {e})") from None
    raw = (schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise ServelabError(
            f"{path}: no servelab metadata in the Parquet schema (not written by `servelab db merge`)"
        )
    try:
        meta = json.loads(raw)
    except ValueError:
        raise ServelabError(f"{path}: servelab metadata is not valid JSON") from None
    if not isinstance(meta, dict):
        raise ServelabError(f"{path}: servelab metadata must be a JSON object, found {type(meta).__name__}")
    return meta


def read_table(path: Path) -> TableData:
    """Read and strictly check one table file; any problem raises ServelabError naming the file and row."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - pyarrow costs start-up time; imported on first read

    path = Path(path)
    family = BY_NAME.get(path.stem)
    if family is None:
        raise ServelabError(f"{path}: unknown table name {path.stem!r}; expected one of {', '.join(BY_NAME)}")
    meta = read_meta(path)
    _check_meta(path, family, meta)
    try:
        # ParquetFile.read, not pq.read_table: the latter imports pyarrow.dataset (~150 ms of startup)
        table = pq.ParquetFile(path).read()
    except Exception as e:  # noqa: BLE001 - any read failure means a corrupt file, reported as one
        raise ServelabError(f"{path}: cannot read rows ({e.__class__.__name__}: {e})") from None
    names = set(table.column_names)
    _check_columns(path, family, table.schema)
    nulls = [
        c for c in (*family.fields, *STAT_COLUMNS, "measured") if c in names and table.column(c).null_count
    ]
    if nulls:
        raise ServelabError(f"{path}: column(s) {', '.join(nulls)} hold empty (null) values")
    cols = {f: _column(table, f, np.int64 if f in family.int_fields else str) for f in family.fields}
    stats = {
        c: _column(table, c, np.int64 if c in ("reps", "campaign") else np.float64) for c in STAT_COLUMNS
    }
    data = TableData(
        family,
        cols,
        stats["latency_us"],
        stats["p10_us"],
        stats["p90_us"],
        stats["reps"],
        stats["campaign"],
        meta,
        table.column("extra").to_pylist() if "extra" in names else None,
        path,
        _column(table, "measured", bool) if "measured" in names else None,
    )
    problems = check_rows(data)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise ServelabError(f"{path}: {'; '.join(problems[:3])}{more}")
    return data


def _column(table, name: str, dtype) -> np.ndarray:
    """One column as a numpy array of `dtype` (strings: numpy unicode). Through Python lists, not pyarrow's
    to_numpy, which imports pandas (about 0.15 s of start-up) for any column type; the tables are small."""
    values = table.column(name).to_pylist()
    if dtype is str:
        return np.array(values, dtype=object).astype(str)
    return np.array(values, dtype=dtype)


def _check_meta(path: Path, family: Family, meta: dict) -> None:
    # the format first: another format's metadata may have another shape
    if meta.get("format") != FORMAT_VERSION or isinstance(meta.get("format"), bool):
        raise ServelabError(
            f"{path}: table format {meta.get('format')!r}, this servelab reads {FORMAT_VERSION}"
        )
    try:
        TableMeta.model_validate(meta)
    except ValidationError as e:
        raise ServelabError.from_validation(e, f"{path}: metadata") from None
    if meta["family"] != family.name:
        raise ServelabError(
            f"{path}: metadata says family {meta['family']!r}, the file name says {family.name!r}"
        )


def _check_columns(path: Path, family: Family, schema) -> None:
    """Every column present, of its type, and key and stat columns without nulls."""
    import pyarrow as pa  # noqa: PLC0415 - pyarrow costs start-up time; imported on first read

    def is_int(t):
        return pa.types.is_integer(t)

    def is_number(t):
        return pa.types.is_integer(t) or pa.types.is_floating(t)

    def is_text(t):
        return pa.types.is_string(t) or pa.types.is_large_string(t)

    expected = {
        f: (is_int, "integers") if f in family.int_fields else (is_text, "strings") for f in family.fields
    }
    expected |= {c: (is_number, "numbers") for c in ("latency_us", "p10_us", "p90_us")}
    expected |= {"reps": (is_int, "integers"), "campaign": (is_int, "integers")}
    expected |= {"extra": (is_text, "JSON strings"), "measured": (pa.types.is_boolean, "booleans")}
    missing = [c for c in (*family.fields, *STAT_COLUMNS) if c not in schema.names]
    if missing:
        raise ServelabError(f"{path}: missing column(s) {', '.join(missing)}")
    for name in schema.names:
        if name in expected and not expected[name][0](schema.field(name).type):
            raise ServelabError(
                f"{path}: column {name!r} must hold {expected[name][1]}, found {schema.field(name).type}"
            )


def check_rows(data: TableData, limit: int = 20) -> list[str]:
    """Every invariant a row must hold; up to `limit` messages naming row and rule."""
    return [msg for _, msg in row_problems(data, limit)]


def row_problems(data: TableData, limit: int | None = 20) -> list[tuple[int, str]]:
    """(row, message) for rows that break an invariant, vectorised over columns."""
    fam, c = data.family, data.cols
    rules: list[tuple[str, np.ndarray]] = []
    for f in fam.int_fields:
        floor = 0 if f in ZERO_OK else 1
        rules.append((f"{f} must be >= {floor}", c[f] < floor))
    rules.append((f"op must be one of {', '.join(fam.ops)}", ~np.isin(c["op"], fam.ops)))
    for f in ("dtype", "kv_dtype"):
        if f in c:
            rules.append((f"{f} must be one of {', '.join(DTYPES)}", ~np.isin(c[f], DTYPES)))
    lat, p10, p90 = data.latency_us, data.p10_us, data.p90_us
    with np.errstate(invalid="ignore"):
        rules.append(("latency_us must be finite and > 0", ~(np.isfinite(lat) & (lat > 0))))
        rules.append(
            ("need p10_us <= latency_us <= p90_us", ~((p10 <= lat * (1 + 1e-6)) & (lat <= p90 * (1 + 1e-6))))
        )
    measured = data.measured if data.measured is not None else np.ones(len(data), dtype=bool)
    rules.append(("a measured row needs reps >= 1", measured & (data.reps < 1)))
    rules.append(("reps must be >= 0", data.reps < 0))
    ncamp = len(data.meta.get("provenance") or [])
    rules.append(
        (
            f"campaign must index the provenance list (0..{ncamp - 1})",
            (data.campaign < 0) | (data.campaign >= ncamp),
        )
    )
    if "kv_heads" in c:
        rules.append(
            (
                "heads must be a multiple of kv_heads",
                (c["kv_heads"] < 1) | (c["heads"] % np.maximum(c["kv_heads"], 1) != 0),
            )
        )
    if "native_heads" in c:
        # rank-local heads = native heads / tp: heads x tp is the model's native head count in every row
        rules.append(
            (
                "heads x tp must equal native_heads (heads must divide native_heads)",
                (c["heads"] > c["native_heads"]) | (c["native_heads"] % np.maximum(c["heads"], 1) != 0),
            )
        )
    if fam.name == "moe":
        rules.append(("topk must be <= experts", c["topk"] > c["experts"]))
        rules.append(("experts must be a multiple of ep", c["experts"] % np.maximum(c["ep"], 1) != 0))
    if fam.name == "comm":
        rules.append(("a collective needs gpus >= 2", c["gpus"] < 2))
    out: list[tuple[int, str]] = []
    for rule, bad in rules:
        for i in np.flatnonzero(bad)[:limit].tolist():
            out.append((i, f"row {i} ({data.describe_row(i)}): {rule}"))
    if data.extra is not None:
        out += _check_extra(data, limit or len(data))
    out += _check_duplicates(data, limit or len(data))
    return out[:limit] if limit else out


def _check_extra(data: TableData, limit: int) -> list[tuple[int, str]]:
    """Extras are JSON objects; where rows name their model and tp (collector extras), heads x tp must be the
    same for one model."""
    if data.extra is None:
        return []
    with_heads = "heads" in data.cols
    seen: dict[str, tuple[int, int]] = {}
    out = []
    for i, raw in enumerate(data.extra):
        if not raw:
            continue
        try:
            extra = json.loads(raw)
        except ValueError:
            out.append((i, f"row {i}: extra is not valid JSON"))
            continue
        if not isinstance(extra, dict):
            out.append((i, f"row {i}: extra must be a JSON object, found {type(extra).__name__}"))
            continue
        if not with_heads or "tp" not in extra or "model" not in extra:
            continue
        tp = extra["tp"]
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            out.append((i, f"row {i}: extra tp {tp!r} must be a positive integer"))
            continue
        product = int(data.cols["heads"][i]) * tp
        model = str(extra["model"])
        first = seen.setdefault(model, (product, i))
        if first[0] != product:
            out.append(
                (
                    i,
                    (
                        f"row {i} ({data.describe_row(i)}): heads x tp = {product} for {model}, "
                        f"but row {first[1]} gives {first[0]} (must be constant per model)"
                    ),
                )
            )
        if len(out) >= limit:
            break
    return out


def _check_duplicates(data: TableData, limit: int) -> list[tuple[int, str]]:
    if len(data) < 2:
        return []
    fields = data.family.fields
    order = np.lexsort([data.cols[f] for f in reversed(fields)])
    same = np.ones(len(order) - 1, dtype=bool)
    for f in fields:
        col = data.cols[f][order]
        same &= col[1:] == col[:-1]
    out = []
    for j in np.flatnonzero(same)[:limit]:
        a, b = int(order[j]), int(order[j + 1])
        out.append((b, f"rows {a} and {b} repeat the key ({data.describe_row(a)}); merge deduplicates them"))
    return out


def table_from_rows(family: Family, rows: list[dict], meta: dict) -> TableData:
    """Column arrays from row dicts (key fields, stats, extras); used by merge and by tests."""
    cols = {}
    defaults = family.key_type._field_defaults
    for f in family.fields:
        values = [r.get(f, defaults.get(f)) for r in rows]
        if f in family.int_fields:
            cols[f] = np.array([_as_int(v, f) for v in values], dtype=np.int64)
        else:
            cols[f] = np.array([str(v) for v in values], dtype=str) if values else np.array([], dtype=str)
    known = set(family.fields) | set(STAT_COLUMNS) | {"extra", "source", "measured"}
    # keys starting with "_" are merge bookkeeping (where a row came from), never stored
    extras = [{k: v for k, v in r.items() if k not in known and not k.startswith("_")} for r in rows]
    extra = [json.dumps(e, sort_keys=True) if e else "" for e in extras] if any(extras) else None

    def stat(name, default=math.nan):
        return np.array([float(r.get(name, default)) for r in rows], dtype=np.float64)

    lat = stat("latency_us")
    return TableData(
        family,
        cols,
        lat,
        np.array([float(r.get("p10_us", r["latency_us"])) for r in rows], dtype=np.float64),
        np.array([float(r.get("p90_us", r["latency_us"])) for r in rows], dtype=np.float64),
        np.array([int(r.get("reps", 1)) for r in rows], dtype=np.int64),
        np.array([int(r.get("campaign", 0)) for r in rows], dtype=np.int64),
        meta,
        extra,
        None,
        np.array([r.get("source", "measured") == "measured" for r in rows], dtype=bool),
    )


def _as_int(value, name: str) -> int:
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise ServelabError(f"field {name!r} must be an integer, got {value!r}") from None
    if out != value and not (isinstance(value, str) and value.strip().lstrip("-").isdigit()):
        raise ServelabError(f"field {name!r} must be an integer, got {value!r}")
    return out
