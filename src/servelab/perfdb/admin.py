"""What `servelab db status / accuracy / validate` report, as plain data (the CLI only formats it)."""

from pathlib import Path

from servelab.errors import ServelabError
from servelab.perfdb.accuracy import passes, table_accuracy
from servelab.perfdb.families import ACCURACY_TARGETS, BY_NAME
from servelab.perfdb.merge import build_table, read_campaign
from servelab.perfdb.table_files import read_table, row_problems
from servelab.perfdb.tables import TableSet, load_tables, table_dirs
from servelab.specs import list_systems, load_system


def _systems(system: str | None):
    return [load_system(system)] if system is not None else [load_system(s) for s in list_systems()]


def status_report(system: str | None = None) -> list[dict]:
    out = []
    for spec in _systems(system):
        in_use = set(in_use_dirs(spec.name))
        for d in table_dirs(spec.name):
            desc = TableSet(d, spec).describe()
            out.append(dict(desc, system=spec.name, in_use=d in in_use))
    return out


def in_use_dirs(system_name: str) -> list[Path]:
    """The directory each backend's predictions read: its first in the search order."""
    best: dict[str, Path] = {}
    for d in table_dirs(system_name):
        best.setdefault(d.parent.name, d)
    return list(best.values())


def accuracy_report(system: str | None = None, tables: Path | None = None) -> list[dict]:
    """Leave-one-out recomputed now for the tables in use (or the given directory)."""
    if tables is not None:
        sets = [load_tables(tables, load_system(system) if system is not None else _system_of(tables))]
    else:
        sets = [TableSet(d, spec) for spec in _systems(system) for d in in_use_dirs(spec.name)]
    out = []
    for ts in sets:
        entry = {"system": ts.system.name, "label": ts.label, "dir": str(ts.dir), "tables": {}}
        for name in ts.files:
            idx = ts.index(name)
            if idx is None:
                continue
            acc = table_accuracy(idx)
            target = ACCURACY_TARGETS.get(name)
            entry["tables"][name] = {
                "rows": len(idx.data),
                "accuracy": acc,
                "target": target,
                "passes": passes(acc, target) if target else None,
            }
        entry["skipped"] = dict(ts.skipped)
        out.append(entry)
    return out


def _system_of(tables: Path):
    """The system a table directory <system>/<backend>/<version> names."""
    parts = Path(tables).resolve().parts
    try:
        return load_system(parts[-3] if len(parts) >= 3 else "")
    except ServelabError:
        raise ServelabError(
            f"{tables}: not under a known system (<system>/<backend>/<version>); give --system",
            field="tables",
        ) from None


def validate_paths(paths: list[Path] | None = None) -> list[tuple[str, str | None]]:
    """(path, problem or None) for each table file or campaign directory."""
    if paths is None:
        paths = [d for s in list_systems() for d in table_dirs(s)]
    out: list[tuple[str, str | None]] = []
    for p in map(Path, paths):
        if p.is_dir() and (p / "provenance.json").exists():
            out.append((str(p), _validate_campaign(p)))
            continue
        files = sorted(p.rglob("*.parquet")) if p.is_dir() else [p]
        if not p.exists():
            out.append((str(p), "no such file or directory"))
            continue
        if not files:
            out.append((str(p), "no table files (*.parquet) and no provenance.json (not a campaign) here"))
            continue
        for f in files:
            try:
                read_table(f)
            except ServelabError as e:
                msg = str(e)
                out.append((str(f), msg[len(str(f)) + 2 :] if msg.startswith(f"{f}: ") else msg))
            else:
                out.append((str(f), None))
    return out


def _validate_campaign(directory: Path) -> str | None:
    try:
        prov, rows, _, problems = read_campaign(directory)
    except ServelabError as e:
        return str(e)
    for fam_name, fam_rows in rows.items():
        for r in fam_rows:
            r["campaign"] = 0
        data, _, where = build_table(BY_NAME[fam_name], fam_rows, {0: 0}, {"provenance": [prov]})
        problems += [f"{fam_name} {where[i]}: {m}" for i, m in row_problems(data, limit=20)]
    if not problems:
        return None
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return "; ".join(problems[:5]) + more
