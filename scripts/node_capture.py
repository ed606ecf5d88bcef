"""The command line the per-node capture scripts share (amd_disagg_capture.py, tilert_capture.py,
llmd_capture.py): `capture --inferencex PATH` records what upstream's scripts start on each node for every
job a predicate selects from the pinned master files, gzip'd JSON in sweep order; `profiles [--check]` writes
(or checks) what servelab renders from that record. Imported by those scripts, which run from scripts/.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Callable
from pathlib import Path

from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import expand

ROOT = Path(__file__).resolve().parents[1]
IX = ROOT / "tests" / "data" / "inferencex"


def rows(selected: Callable[[dict], bool]) -> list[tuple[str, dict]]:
    """(config key, row) of every selected job of the pinned configs, in sweep order."""
    return [(j.key, j.row) for j in expand(open_store(IX / "configs")) if selected(j.row)]


def read_capture(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))


def main(
    doc: str,
    capture_path: Path,
    selected: Callable[[dict], bool],
    record: Callable[[Path, str, dict], dict],
    profiles_path: Path,
    profiles_from: Callable[[list[dict]], dict],
) -> int:
    """`record(inferencex, key, row)`: one job's record (its id, key, row and what each node started)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("capture")
    p.add_argument("--inferencex", type=Path, required=True, help="an InferenceX checkout (pinned commit)")
    p = sub.add_parser("profiles")
    p.add_argument("--check", action="store_true", help="fail when the file is stale; write nothing")
    args = parser.parse_args()
    if args.cmd == "capture":
        inferencex = args.inferencex.resolve()
        records = [record(inferencex, key, row) for key, row in rows(selected)]
        data = json.dumps(records, indent=0, sort_keys=True).encode()
        capture_path.write_bytes(gzip.compress(data, mtime=0))
        print(f"{len(records)} jobs, {sum(len(r['nodes']) for r in records)} nodes captured")
        return 0
    text = json.dumps(profiles_from(read_capture(capture_path)), indent=1, sort_keys=True) + "\n"
    if args.check:
        current = profiles_path.read_text() == text
        print(f"{profiles_path.name} " + ("current" if current else "stale: run profiles"))
        return 0 if current else 1
    profiles_path.write_text(text)
    print(f"wrote {profiles_path}")
    return 0
