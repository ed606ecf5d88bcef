"""The single-node agentic-coding jobs of an InferenceX store, and the id each has in a capture
(tests/data/inferencex/launch/agentic-launches.json.gz, made by scripts/ix_launch.py capture --agentic)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from servelab.recipes.filters import Filters
from servelab.recipes.matrix import MatrixRow, Point, matrix
from servelab.recipes.recipe_store import open_store
from servelab.recipes.schema import Recipe


def agentic_points(configs: Path) -> Iterator[tuple[Point, Recipe, MatrixRow]]:
    """(point, recipe, typed row) for every single-node agentic-coding job of the store, in sweep order."""
    store = open_store(configs)
    for point in matrix(store, None, Filters(scenario_type=["agentic-coding"])):
        row = MatrixRow.model_validate(point.row)
        if not row.multinode:
            yield point, store.recipes[point.key], row


def agentic_job_id(point: Point, row: MatrixRow) -> str:
    """The job's id in a capture: key, layout, KV offload tier and backend, DRAM budget, concurrency."""
    dpa = "-dpa" if point.arm.dp_attn_ else ""
    backend = (row.kv_offload_backend or {}).get("name")
    # kv-offloading is required on single-node agentic arms
    kv = f"{row.kv_offloading}-{backend}" if backend else f"{row.kv_offloading}"
    layout = f"tp{point.arm.tp_}-ep{point.arm.ep_}{dpa}-{point.arm.spec_}"
    return f"{point.key} agentic {layout} kv{kv} dram{row.total_cpu_dram_gb} conc{row.conc}"
