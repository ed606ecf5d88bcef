"""Merge collector campaigns into the tables of one system / backend / version.

A campaign directory holds rows/<op>.jsonl (one JSON object per measured key: key fields with `op`, latency_us
(median), p10_us, p90_us, reps, extras), errors.jsonl and provenance.json. Rows are checked with the same
rules as the table loader; a key measured by more than one campaign (or already in the table) keeps the newest
campaign's row, by provenance date, and the report says how many were replaced. Leave-one-out accuracy is
computed here and stored in each table's metadata, so queries never recompute it.
"""

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from servelab.errors import ServelabError
from servelab.perfdb.accuracy import table_accuracy
from servelab.perfdb.families import BY_OP, Family
from servelab.perfdb.interpolate import Index
from servelab.perfdb.reference import reference_fn
from servelab.perfdb.table_files import (
    PROVENANCE_FIELDS,
    STAT_COLUMNS,
    Provenance,
    TableData,
    locked_dir,
    read_table,
    row_problems,
    table_from_rows,
    write_table,
)
from servelab.specs import load_system


def read_campaign(directory: Path) -> tuple[dict, dict[str, list[dict]], int, list[str]]:
    """(provenance, rows by family, number of collector errors, problems) of one campaign directory."""
    directory = Path(directory)
    prov_path = directory / "provenance.json"
    if not prov_path.is_file():
        raise ServelabError(f"{directory}: no provenance.json (not a collector campaign directory)")
    try:
        prov = json.loads(prov_path.read_text())
    except ValueError as e:
        raise ServelabError(f"{prov_path}: not valid JSON ({e})") from None
    if not isinstance(prov, dict):
        raise ServelabError(f"{prov_path}: expected a JSON object")
    prov = normalize_provenance(prov)
    missing = [k for k in PROVENANCE_FIELDS if k not in prov]
    if missing:
        raise ServelabError(
            f"{prov_path}: missing {', '.join(missing)} (needed: {', '.join(PROVENANCE_FIELDS)})"
        )
    try:
        Provenance.model_validate(prov)  # what the table loader will ask of it
    except ValidationError as e:
        raise ServelabError.from_validation(e, str(prov_path)) from None
    rows: dict[str, list[dict]] = {}
    problems: list[str] = []
    files = sorted((directory / "rows").glob("*.jsonl"))
    if not files:
        raise ServelabError(f"{directory}: no rows/*.jsonl files")
    for path in files:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                problems.append(f"{path} line {n}: not valid JSON")
                continue
            fam = BY_OP.get(str(row.get("op"))) if isinstance(row, dict) else None
            if fam is None:
                problems.append(
                    f"{path} line {n}: unknown op {row.get('op') if isinstance(row, dict) else row!r}"
                )
                continue
            missing = [
                f for f in fam.fields if f != "op" and f not in row and f not in fam.key_type._field_defaults
            ]
            if missing or "latency_us" not in row:
                problems.append(f"{path} line {n}: missing {', '.join(missing or ['latency_us'])}")
                continue
            wrong = [f for f in (*fam.int_fields, "reps") if f in row and not _is_int(row[f])]
            wrong += [c for c in ("latency_us", "p10_us", "p90_us") if c in row and not _is_num(row[c])]
            if wrong:
                rule = "must be numbers (shapes and reps: integers within 64 bits)"
                problems.append(f"{path} line {n}: {', '.join(wrong)} {rule}")
                continue
            row["_where"] = f"{path.name} line {n}"
            rows.setdefault(fam.name, []).append(row)
    errors_path = directory / "errors.jsonl"
    num_errors = (
        sum(1 for line in errors_path.read_text().splitlines() if line.strip())
        if errors_path.is_file()
        else 0
    )
    return prov, rows, num_errors, problems


ALIASES = {"driver": ("driver", "driver_version"), "clocks": ("clocks", "clocks.sm", "clocks.max.sm")}


def normalize_provenance(prov: dict) -> dict:
    """Lift the required fields to the top level where the collector nested them (facts under a sub-object,
    driver and clocks in per-GPU nvidia-smi records); the original nesting is kept as it was."""
    out = dict(prov)

    def find(obj, names, depth=0):
        if isinstance(obj, dict):
            for name in names:
                if obj.get(name) not in (None, ""):
                    return obj[name]
            if depth < 6:
                for v in obj.values():
                    hit = find(v, names, depth + 1)
                    if hit is not None:
                        return hit
        elif isinstance(obj, list) and depth < 6:
            for v in obj:
                hit = find(v, names, depth + 1)
                if hit is not None:
                    return hit
        return None

    for field in PROVENANCE_FIELDS:
        if out.get(field) in (None, ""):
            if field == "clocks":
                smi = [g for g in _records(prov) if any(k.startswith("clocks.") for k in g)]
                value = [
                    {k: v for k, v in g.items() if k.startswith(("clocks", "power", "temperature"))}
                    for g in smi
                ] or None
            else:
                value = find(prov, ALIASES.get(field, (field,)))
            if value is not None:
                out[field] = value
    return out


def _records(obj, depth=0) -> list[dict]:
    """Every dict nested in obj (nvidia-smi records and the like)."""
    found = []
    if isinstance(obj, dict):
        found.append(obj)
        if depth < 6:
            for v in obj.values():
                found += _records(v, depth + 1)
    elif isinstance(obj, list) and depth < 6:
        for v in obj:
            found += _records(v, depth + 1)
    return found


def _identity(prov: dict) -> str:
    """What makes two provenance entries the same campaign: everything but merge bookkeeping."""
    return json.dumps(
        {k: v for k, v in prov.items() if k not in ("source", "rows", "collector_errors")},
        sort_keys=True,
        default=str,
    )


def _is_int(v) -> bool:
    """An integer the table's int64 columns hold (an integral float is one: JSON writers may add '.0')."""
    whole = isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()
    return whole and abs(v) < 1 << 62


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _date_key(prov: dict) -> str:
    """A sortable timestamp from provenance date (ISO 8601); unparseable dates sort first."""
    try:
        d = datetime.fromisoformat(str(prov.get("date")).replace("Z", "+00:00"))
    except ValueError:
        return ""
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    return d.astimezone(UTC).isoformat()


def _check_system(system, prov: dict, where: str) -> None:
    got = str(prov.get("gpu_name", ""))
    if system.gpu_name.lower() not in got.lower():
        raise ServelabError(
            f"{where}: provenance gpu_name {got!r} does not match {system.name} "
            f"({system.gpu_name!r}); merge it into that system's directory"
        )


def merge(
    dirs: list[Path],
    into: Path,
    drop_bad: bool = False,
    command: str | None = None,
    ops: set[str] | None = None,
) -> dict:
    """Merge campaigns into the tables under `into` (<root>/<system>/<backend>/<version>/); a report. With
    `ops`, only those ops' rows of the campaigns are merged (the rest stay in the campaign, unread)."""
    into = Path(into)
    parts = into.resolve().parts
    if len(parts) < 3:
        raise ServelabError(f"{into}: expected a directory <system>/<backend>/<version>", field="into")
    system_name, backend, version = parts[-3:]
    system = load_system(system_name)
    report: dict = {
        "into": str(into),
        "system": system.name,
        "backend": backend,
        "version": version,
        "campaigns": [],
        "tables": {},
        "dropped": [],
    }

    # campaigns are read and checked before the directory is touched; a bad one leaves it as it was
    if ops is not None:
        unknown = sorted(op for op in ops if op not in BY_OP)
        if unknown:
            raise ServelabError(f"unknown op {unknown[0]!r}; ops: {', '.join(sorted(BY_OP))}", field="ops")
    campaigns = [(d, _only(read_campaign(Path(d)), ops)) for d in dirs]
    for d, (prov, *_) in campaigns:
        _check_system(system, prov, str(Path(d) / "provenance.json"))
    with locked_dir(into):
        return _merge_locked(campaigns, into, system, drop_bad, command, report)


def _only(campaign: tuple, ops: set[str] | None) -> tuple:
    """A read campaign with only the rows of `ops` (all with None)."""
    if ops is None:
        return campaign
    prov, rows, num_errors, problems = campaign
    kept = {fam: [r for r in rs if r["op"] in ops] for fam, rs in rows.items()}
    return prov, {fam: rs for fam, rs in kept.items() if rs}, num_errors, problems


def _merge_locked(
    campaigns: list, into: Path, system, drop_bad: bool, command: str | None, report: dict
) -> dict:
    """The read-merge-write of `merge`, under the directory's lock: no other merge reads or writes these
    tables in between, so none loses another's rows."""
    reference = reference_fn(system)
    # existing tables first: their campaigns are older unless their dates say otherwise. Every table file
    # carries the same provenance list, so entries are matched by identity rather than appended per file.
    provenance: list[dict] = []
    ident_index: dict[str, int] = {}

    def campaign_index(prov: dict) -> int:
        ident = _identity(prov)
        if ident not in ident_index:
            ident_index[ident] = len(provenance)
            provenance.append(prov)
        return ident_index[ident]

    rows: dict[str, list[dict]] = {}
    for path in sorted(into.glob("*.parquet")) if into.is_dir() else []:
        old = read_table(
            path
        )  # strict: a corrupt existing table stops the merge rather than being overwritten
        remap = [campaign_index(p) for p in old.meta["provenance"]]
        fam_rows = _rows_of(old, 0)
        for r in fam_rows:
            r["campaign"] = remap[r["campaign"]]
        rows.setdefault(old.family.name, []).extend(fam_rows)
    problems: list[str] = []
    for d, (prov, new_rows, num_errors, unreadable) in campaigns:
        problems += unreadable
        count = sum(len(v) for v in new_rows.values())
        entry = dict(prov, source=str(d), rows=count, collector_errors=num_errors)
        again = _identity(entry) in ident_index
        index = campaign_index(entry)
        provenance[index] = entry
        if again:  # the same campaign merged before: its fresh rows replace its old ones, not "newer" ones
            for fam_name in rows:
                rows[fam_name] = [r for r in rows[fam_name] if r["campaign"] != index]
        report["campaigns"].append(
            {
                "dir": str(d),
                "date": prov.get("date"),
                "rows": count,
                "errors": num_errors,
                "merged_before": again,
            }
        )
        for fam_name, fam_rows in new_rows.items():
            for r in fam_rows:
                r["campaign"] = index
            rows.setdefault(fam_name, []).extend(fam_rows)
    rows = {k: v for k, v in rows.items() if v}

    order = sorted(range(len(provenance)), key=lambda i: (_date_key(provenance[i]), i))
    rank = {c: r for r, c in enumerate(order)}  # newest campaign has the highest rank
    tables = {}
    for fam_name, fam_rows in rows.items():
        fam = BY_OP[fam_rows[0]["op"]]
        data, dup, wheres = build_table(fam, fam_rows, rank, {"provenance": provenance})
        bad = row_problems(data, limit=None)
        if bad:
            msgs = [f"{fam_name} {wheres[i]}: {m}" for i, m in bad]
            if not drop_bad:
                more = f" (and {len(msgs) - 5} more)" if len(msgs) > 5 else ""
                raise ServelabError(
                    f"{fam_name}: {len(msgs)} bad row(s): {'; '.join(msgs[:5])}{more}; "
                    "fix the campaign, or merge with bad rows dropped (drop_bad)"
                )
            report["dropped"] += msgs
            keep = np.ones(len(data), dtype=bool)
            keep[[i for i, _ in bad]] = False
            data = _subset(data, keep)
        tables[fam_name] = (data, dup)
    if problems:
        if not drop_bad:
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            raise ServelabError(
                f"{len(problems)} unreadable row(s): {'; '.join(problems[:5])}{more}; "
                "fix the campaign, or merge with bad rows dropped (drop_bad)"
            )
        report["dropped"] += problems

    merged_at = datetime.now(UTC).isoformat(timespec="seconds")
    for fam_name, (data, dup) in tables.items():
        data.meta = {
            "provenance": provenance,
            "system": system.name,
            "backend": report["backend"],
            "version": report["version"],
        }
        accuracy = table_accuracy(Index(data, reference))
        data.meta.update(
            accuracy=accuracy,
            merged={
                "date": merged_at,
                "command": command or " ".join(sys.argv),
                "replaced_by_newer": dup,
                "rows": len(data),
                "interpolation_reference": "roofline without tile quantization, occupancy-aware for prefill, "
                "on the default block of efficiencies.json (never the per-system fit)",
            },
        )
        write_table(into / f"{fam_name}.parquet", data)
        report["tables"][fam_name] = {"rows": len(data), "replaced_by_newer": dup, "accuracy": accuracy}
    return report


def _rows_of(data: TableData, offset: int) -> list[dict]:
    out = []
    for i in range(len(data)):
        row = {f: data.cols[f][i].item() for f in data.family.fields}
        row.update(
            latency_us=float(data.latency_us[i]),
            p10_us=float(data.p10_us[i]),
            p90_us=float(data.p90_us[i]),
            reps=int(data.reps[i]),
            campaign=int(data.campaign[i]) + offset,
            source="measured" if data.is_measured(i) else "modelled",
        )
        if data.extra is not None and data.extra[i]:
            row.update(json.loads(data.extra[i]))
        out.append(row)
    return out


def build_table(fam: Family, rows: list[dict], rank: dict, meta: dict) -> tuple[TableData, int, list[str]]:
    """One table from rows, keeping the newest campaign's row for each key; returns it and how many rows
    were replaced by a newer measurement of the same key."""
    best: dict[tuple, dict] = {}
    replaced = 0
    defaults = fam.key_type._field_defaults
    for r in rows:
        key = tuple(str(r.get(f, defaults.get(f))) for f in fam.fields)
        prev = best.get(key)
        if prev is not None:
            replaced += 1
            if rank[r["campaign"]] < rank[prev["campaign"]]:
                continue
        best[key] = r
    kept = list(best.values())
    where = [r.get("_where", "(existing table)") for r in kept]
    return table_from_rows(fam, kept, meta), replaced, where


def _subset(data: TableData, keep: np.ndarray) -> TableData:
    idx = np.flatnonzero(keep)
    return TableData(
        data.family,
        {k: v[idx] for k, v in data.cols.items()},
        data.latency_us[idx],
        data.p10_us[idx],
        data.p90_us[idx],
        data.reps[idx],
        data.campaign[idx],
        data.meta,
        [data.extra[i] for i in idx] if data.extra is not None else None,
        None,
        data.measured[idx] if data.measured is not None else None,
    )


__all__ = ["STAT_COLUMNS", "merge", "read_campaign"]
