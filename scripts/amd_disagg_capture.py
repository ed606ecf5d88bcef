"""What InferenceX's AMD multinode disaggregated jobs start on each node, and servelab's per-role profiles of
it (a development tool; run it from a servelab checkout).

    python scripts/amd_disagg_capture.py capture --inferencex PATH   # -> amd-disagg-launches.json.gz
    python scripts/amd_disagg_capture.py profiles [--check]          # -> recipes/data/amd_disagg.json

InferenceX runs an mi355x-disagg job through benchmarks/multi_node/<prefix>_<precision>_mi355x_<framework>.sh,
submit.sh and job.slurm, which start benchmarks/multi_node/amd_utils/server.sh on every node with the node's
rank and the nodes' addresses. `capture` runs server.sh once per node of every such job of the pinned master
files, in its dry-run mode, under servelab.recipes.capture.amd_disagg (PATH: an InferenceX checkout at the
pinned commit). `profiles` turns it into what servelab renders from (recipes/amd_disagg.py): per config key
and role, the server command for each layout of that role, with the nodes' addresses as `{{node:N}}`.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from servelab.recipes.amd_disagg import PROFILES_PATH, is_amd_disagg, job_id, profiles_from
from servelab.recipes.capture.amd_disagg import capture_row
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import expand

ROOT = Path(__file__).resolve().parents[1]
IX = ROOT / "tests" / "data" / "inferencex"
CAPTURE = IX / "launch" / "amd-disagg-launches.json.gz"


def rows() -> list[tuple[str, dict]]:
    """(config key, row) of every AMD disaggregated job of the pinned configs, in sweep order."""
    store = open_store(IX / "configs")
    return [(j.key, j.row) for j in expand(store) if is_amd_disagg(j.row)]


def capture(inferencex: Path) -> list[dict]:
    benchmarks = inferencex / "benchmarks"
    out = []
    for key, row in rows():
        out.append({"id": job_id(key, row), "key": key, "row": row, "nodes": capture_row(benchmarks, row)})
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
