"""What InferenceX's llm-d disaggregated jobs start on each node, and what servelab renders from it (a
development tool; run it from a servelab checkout, as root: the capture runs the launcher in namespaces).

    python scripts/llmd_capture.py capture --inferencex PATH   # -> tests/data/.../llmd-launches.json.gz
    python scripts/llmd_capture.py profiles [--check]          # -> recipes/data/llmd.json

InferenceX runs an llmd-vllm job (runner gb200) through runners/launch_gb200-nv.sh, the model's
benchmarks/multi_node/<prefix>_<precision>_gb200_llmd-vllm-disagg.sh, llm-d/submit.sh and the job.slurm it
submits, which sruns llm-d/server.sh on every node. `capture` runs that chain under bash with stubs for every
llmd-vllm job of the pinned master files (servelab.recipes.capture.llmd; PATH: an InferenceX checkout at the
pinned commit); `profiles` turns it into what servelab renders from (recipes/llmd.py): each job's processes
and files with the nodes' addresses as `{{node:N}}`.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from servelab.recipes.capture.llmd import capture_row
from servelab.recipes.llmd import PROFILES_PATH, is_llmd, job_id, profiles_from
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import expand

ROOT = Path(__file__).resolve().parents[1]
IX = ROOT / "tests" / "data" / "inferencex"
CAPTURE = IX / "launch" / "llmd-launches.json.gz"


def rows() -> list[tuple[str, dict]]:
    """(config key, row) of every llmd-vllm job of the pinned configs, in sweep order."""
    store = open_store(IX / "configs")
    return [(j.key, j.row) for j in expand(store) if is_llmd(j.row)]


def capture(inferencex: Path) -> list[dict]:
    out = []
    for key, row in rows():
        got = capture_row(inferencex, row)
        # the scripts' last lines (their process ids differ run to run) are not part of the record
        record = {"id": job_id(key, row), "key": key, "row": row}
        out.append({**record, "nodes": got["nodes"], "files": got["files"], "bench": got["bench"]})
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
