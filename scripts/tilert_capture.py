"""What InferenceX's TileRT disaggregated jobs start on each node, and what servelab renders from it (a
development tool; run it from a servelab checkout).

    python scripts/tilert_capture.py capture --inferencex PATH   # -> tests/data/.../tilert-launches.json.gz
    python scripts/tilert_capture.py profiles [--check]          # -> recipes/data/tilert.json

InferenceX runs a tilert job (runner b200-multinode) through runners/launch_b200-dgxc.sh, the model's
benchmarks/multi_node/<prefix>_<precision>_b200_tilert-disagg.sh and tilert_utils/submit.sh, which srun
tilert_utils/run_node.sh on its two nodes. `capture` runs that chain under bash with stubs for every tilert
job of the pinned master files (servelab.recipes.capture.tilert; PATH: an InferenceX checkout at the pinned
commit); `profiles` turns it into what servelab renders from (recipes/tilert.py): each job's processes with
the nodes' addresses as `{{node:N}}`.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from servelab.recipes.capture.tilert import capture_row
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import expand
from servelab.recipes.tilert import PROFILES_PATH, is_tilert, job_id, profiles_from

ROOT = Path(__file__).resolve().parents[1]
IX = ROOT / "tests" / "data" / "inferencex"
CAPTURE = IX / "launch" / "tilert-launches.json.gz"


def rows() -> list[tuple[str, dict]]:
    """(config key, row) of every tilert job of the pinned configs, in sweep order."""
    store = open_store(IX / "configs")
    return [(j.key, j.row) for j in expand(store) if is_tilert(j.row)]


def capture(inferencex: Path) -> list[dict]:
    out = []
    for key, row in rows():
        got = capture_row(inferencex, row)
        # the scripts' last lines (their process ids differ run to run) are not part of the record
        out.append(
            {"id": job_id(key, row), "key": key, "row": row, "nodes": got["nodes"], "bench": got["bench"]}
        )
    return out


def read_capture(path: Path = CAPTURE) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("capture")
    p.add_argument("--inferencex", type=Path, required=True, help="an InferenceX checkout (pinned commit)")
    p = sub.add_parser("profiles")
    p.add_argument("--check", action="store_true", help="fail when the file is stale; write nothing")
    args = parser.parse_args()
    if args.cmd == "capture":
        records = capture(args.inferencex.resolve())
        data = json.dumps(records, indent=0, sort_keys=True).encode()
        CAPTURE.write_bytes(gzip.compress(data, mtime=0))
        print(f"{len(records)} jobs, {sum(len(r['nodes']) for r in records)} nodes captured")
        return 0
    text = json.dumps(profiles_from(read_capture()), indent=1, sort_keys=True) + "\n"
    if args.check:
        current = PROFILES_PATH.read_text() == text
        print(f"{PROFILES_PATH.name} " + ("current" if current else "stale: run profiles"))
        return 0 if current else 1
    PROFILES_PATH.write_text(text)
    print(f"wrote {PROFILES_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
