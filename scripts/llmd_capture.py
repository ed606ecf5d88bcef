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

from pathlib import Path

import node_capture

from servelab.recipes.capture.llmd import capture_row
from servelab.recipes.llmd import PROFILES_PATH, is_llmd, job_id, profiles_from

CAPTURE = node_capture.IX / "launch" / "llmd-launches.json.gz"


def record(inferencex: Path, key: str, row: dict) -> dict:
    got = capture_row(inferencex, row)
    # the scripts' last lines (their process ids differ run to run) are not part of the record
    return {"id": job_id(key, row), "key": key, "row": row} | {k: got[k] for k in ("nodes", "files", "bench")}


if __name__ == "__main__":
    raise SystemExit(node_capture.main(__doc__, CAPTURE, is_llmd, record, PROFILES_PATH, profiles_from))
