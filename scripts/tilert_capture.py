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

from pathlib import Path

import node_capture

from servelab.recipes.capture.tilert import capture_row
from servelab.recipes.tilert import PROFILES_PATH, is_tilert, job_id, profiles_from

CAPTURE = node_capture.IX / "launch" / "tilert-launches.json.gz"


def record(inferencex: Path, key: str, row: dict) -> dict:
    got = capture_row(inferencex, row)
    return {"id": job_id(key, row), "key": key, "row": row, "nodes": got["nodes"], "bench": got["bench"]}


if __name__ == "__main__":
    raise SystemExit(node_capture.main(__doc__, CAPTURE, is_tilert, record, PROFILES_PATH, profiles_from))
