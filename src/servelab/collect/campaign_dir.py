"""The campaign directory: rows/<op>.jsonl (one measured key per line), errors.jsonl, provenance.json,
acceptance.json. Append-only and line-buffered, so a killed campaign keeps every row it finished; resuming
skips every key already in rows/ (and in errors.jsonl unless errors are retried)."""

import json
import os
from pathlib import Path

from servelab.perfdb.keys import KEY_TYPES, OpKey
from servelab.perfdb.ops import OpName


def key_id(key: OpKey) -> str:
    """A stable identity for a key: its fields as canonical JSON (op included)."""
    return json.dumps(key._asdict(), sort_keys=True, separators=(",", ":"))


def key_from_row(row: dict) -> OpKey:
    cls = KEY_TYPES.get(row["op"])
    return cls(**{f: row[f] for f in cls._fields if f != "op"}, op=OpName(row["op"]))


class CampaignDir:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.rows_dir = self.root / "rows"
        self.errors_path = self.root / "errors.jsonl"

    def ensure(self) -> None:
        """Create the directory; end any line a killed run left half-written, so new rows start on their
        own."""
        self.rows_dir.mkdir(parents=True, exist_ok=True)
        for path in [*self.rows_dir.glob("*.jsonl"), self.errors_path]:
            if path.exists() and path.stat().st_size:
                with open(path, "rb") as f:
                    f.seek(-1, 2)
                    last = f.read(1)
                if last != b"\n":
                    with open(path, "a") as f:
                        f.write("\n")

    def rows_path(self, op: str) -> Path:
        return self.rows_dir / f"{op}.jsonl"

    # ---- reading ------------------------------------------------------------------------------------------
    def rows(self, op: str | None = None) -> list[dict]:
        paths = [self.rows_path(op)] if op else sorted(self.rows_dir.glob("*.jsonl"))
        out = []
        for path in paths:
            out.extend(_read_jsonl(path))
        return out

    def errors(self) -> list[dict]:
        return _read_jsonl(self.errors_path)

    def done_ids(self, include_errors: bool = True) -> set[str]:
        done = {key_id(key_from_row(r)) for r in self.rows()}
        if include_errors:
            done |= {
                key_id(key_from_row(e["key"]))
                for e in self.errors()
                if e.get("key", {}).get("op") in KEY_TYPES
            }
        return done

    # ---- writing (the campaign's parent process is the only writer) ---------------------------------------
    def add_row(self, key: OpKey, result: dict) -> None:
        row = key._asdict() | result
        _append(self.rows_path(key.op), row)

    def add_error(self, key: OpKey, error_class: str, message: str) -> None:
        _append(
            self.errors_path, {"key": key._asdict(), "error_class": error_class, "message": message[:2000]}
        )

    def drop_errors(self, ids: set[str]) -> None:
        """Forget earlier errors of keys about to be retried, so errors.jsonl keeps one line per key."""
        kept = [e for e in self.errors() if key_id(key_from_row(e["key"])) not in ids]
        tmp = self.errors_path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(e) + "\n" for e in kept))
        os.replace(tmp, self.errors_path)

    def write_json(self, name: str, data: dict) -> None:
        tmp = self.root / (name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.root / name)


def _append(path: Path, obj: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")
        f.flush()


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short when the campaign was killed mid-write: that key runs again
    return out
