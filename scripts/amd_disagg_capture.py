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

from pathlib import Path

import node_capture

from servelab.recipes.amd_disagg import PROFILES_PATH, is_amd_disagg, job_id, profiles_from
from servelab.recipes.capture.amd_disagg import capture_row

CAPTURE = node_capture.IX / "launch" / "amd-disagg-launches.json.gz"


def record(inferencex: Path, key: str, row: dict) -> dict:
    return {
        "id": job_id(key, row),
        "key": key,
        "row": row,
        "nodes": capture_row(inferencex / "benchmarks", row),
    }


if __name__ == "__main__":
    raise SystemExit(node_capture.main(__doc__, CAPTURE, is_amd_disagg, record, PROFILES_PATH, profiles_from))
