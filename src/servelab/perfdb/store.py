"""Perf table files: one Parquet file per op family, provenance and accuracy in the schema metadata.

Layout: <root>/<system>/<backend>/<version>/<family>.parquet. Columns: the key fields of the family's op key
(rank-local shapes plus native heads where models could collide), then latency_us (median), p10_us, p90_us,
reps, campaign (index into the provenance list) and an optional extra (JSON per row: SDPA backend, routing,
...).

The loader is strict: a row that breaks an invariant (a head count that does not divide, p10 above the median,
a duplicate key, ...) rejects the whole file with a message naming the file, the row and the rule.
"""

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from servelab.errors import ServelabError
from servelab.perfdb.families import BY_NAME, Family

FORMAT_VERSION = 1
META_KEY = b"servelab"
PROVENANCE_FIELDS = ("gpu_name", "driver", "cuda", "torch", "date", "clocks", "command")
DTYPES = ("bf16", "fp16", "fp8", "fp8_block", "fp4", "mxfp4", "nvfp4")
ZERO_OK = ("window", "flops")  # shape fields where 0 is meaningful (full attention, a pure copy)
STAT_COLUMNS = ("latency_us", "p10_us", "p90_us", "reps", "campaign")


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
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp, compression="zstd")
    tmp.replace(path)  # never leave a half-written table where the loader looks


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
    missing = [c for c in (*family.fields, *STAT_COLUMNS) if c not in names]
    if missing:
        raise ServelabError(f"{path}: missing column(s) {', '.join(missing)}")
    cols = {}
    for f in family.fields:
        arr = table.column(f).to_numpy(zero_copy_only=False)
        if f in family.int_fields:
            if arr.dtype.kind not in "iu":
                raise ServelabError(f"{path}: column {f!r} must hold integers, found {arr.dtype}")
            cols[f] = arr.astype(np.int64)
        else:
            cols[f] = arr.astype(str)
    stats = {c: table.column(c).to_numpy(zero_copy_only=False) for c in STAT_COLUMNS}
    data = TableData(
        family,
        cols,
        stats["latency_us"].astype(np.float64),
        stats["p10_us"].astype(np.float64),
        stats["p90_us"].astype(np.float64),
        stats["reps"].astype(np.int64),
        stats["campaign"].astype(np.int64),
        meta,
        table.column("extra").to_pylist() if "extra" in names else None,
        path,
        table.column("measured").to_numpy(zero_copy_only=False).astype(bool) if "measured" in names else None,
    )
    problems = check_rows(data)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise ServelabError(f"{path}: {'; '.join(problems[:3])}{more}")
    return data


def _check_meta(path: Path, family: Family, meta: dict) -> None:
    if meta.get("format") != FORMAT_VERSION:
        raise ServelabError(
            f"{path}: table format {meta.get('format')!r}, this servelab reads {FORMAT_VERSION}"
        )
    if meta.get("family") != family.name:
        raise ServelabError(
            f"{path}: metadata says family {meta.get('family')!r}, the file name says {family.name!r}"
        )
    prov = meta.get("provenance")
    if not isinstance(prov, list) or not prov:
        raise ServelabError(f"{path}: metadata has no provenance list")
    for i, p in enumerate(prov):
        missing = [k for k in PROVENANCE_FIELDS if not isinstance(p, dict) or k not in p]
        if missing:
            raise ServelabError(f"{path}: provenance[{i}] lacks {', '.join(missing)}")


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
        out += _check_extra_tp(data, limit or len(data))
    out += _check_duplicates(data, limit or len(data))
    return out[:limit] if limit else out


def _check_extra_tp(data: TableData, limit: int) -> list[tuple[int, str]]:
    """Where rows name their model and tp (collector extras), heads x tp must be the same for one model."""
    if data.extra is None or ("native_heads" not in data.cols and "heads" not in data.cols):
        return []
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
        if not isinstance(extra, dict) or "tp" not in extra or "model" not in extra:
            continue
        try:
            product = int(data.cols["heads"][i]) * int(extra["tp"])
        except (TypeError, ValueError):
            out.append((i, f"row {i}: extra tp {extra['tp']!r} is not an integer"))
            continue
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
