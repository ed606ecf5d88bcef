"""One op query, or a file of them, answered as plain dicts (what `servelab db query --json` prints)."""

import json
from collections.abc import Iterator
from pathlib import Path

from servelab.errors import ServelabError
from servelab.perfdb.db import PerfDB
from servelab.perfdb.keys import key_from_dict
from servelab.perfdb.shapes import check_key
from servelab.perfdb.tables import load_tables
from servelab.specs import load_system
from servelab.userfiles import check_regular


def make_db(system_name: str, tables_dir: Path | None = None, roofline_only: bool = False):
    """A PerfDB for the system: the given table directory, else the embedded/default tables."""
    system = load_system(system_name)
    if roofline_only:
        return PerfDB(system, use_tables=False)
    if tables_dir is not None:
        return PerfDB(system, tables=load_tables(tables_dir, system))
    return PerfDB(system)


def answer(db, op: str, fields: dict) -> dict:
    key = check_key(key_from_dict(op, fields))
    lat = db.query(key)
    return {
        **key._asdict(),
        "system": db.system.name,
        "latency_us": round(lat.us, 4),
        "latency_us_low": round(lat.low_us, 4),
        "latency_us_high": round(lat.high_us, 4),
        "source": lat.source,
        "note": lat.note,
    }


def answer_lines(db, path: Path) -> Iterator[dict]:
    """One result per non-empty input line; a bad line yields {"line", "field", "error"} (the field where one
    is to blame) and the rest still answer."""
    check_regular(Path(path), "batch")  # a FIFO would be waited on forever
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ServelabError(f"{path}: cannot read ({e.strerror})", field="batch") from None
    except UnicodeDecodeError:
        raise ServelabError(
            f"{path}: not a UTF-8 text file (one JSON object per line)", field="batch"
        ) from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            yield {"line": n, "error": f"{path} line {n}: not valid JSON"}
            continue
        try:
            if not isinstance(obj, dict):
                raise ServelabError('expected a JSON object with "op" (a name) and shape fields')
            if not isinstance(obj.get("op"), str):
                raise ServelabError("expected the op's name (a string)", field="op")
            yield answer(db, obj["op"], {k: v for k, v in obj.items() if k != "op"})
        except ServelabError as e:
            record: dict = {"line": n}
            if e.field:
                record["field"] = e.field
            yield {**record, "error": f"{path} line {n}: {e}"}
