"""The pinned InferenceX store's whole sweep (tests/data/inferencex/configs, 1,820 jobs), expanded once in a
test run for every module that reads it (an expansion renders every launch and deployment: 2-4 s; the
pytest-xdist workers share one, tests/once_a_run.py). The jobs are only read, never changed."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

from once_a_run import once_a_run

from servelab.recipes.filters import Filters
from servelab.recipes.job import Job
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import expand

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "inferencex" / "configs"


def _expanded() -> tuple[Job, ...]:
    return tuple(expand(open_store(CONFIGS), [], Filters(max_jobs=100_000)))


@cache
def pinned_jobs() -> tuple[Job, ...]:
    return once_a_run("pinned_jobs", _expanded)


def jobs_by_id(selected: Callable[[dict], bool], job_id: Callable[[str, dict], str]) -> dict[str, Job]:
    """The pinned sweep's selected jobs, by the id a capture records them under."""
    return {job_id(j.key, j.row): j for j in pinned_jobs() if selected(j.row)}


def rendered(deployment, node_ips: list[str]) -> list[tuple]:
    """(node, argv, env) of every process of a deployment at the capture's node addresses, sorted."""
    at = deployment.at_addresses(node_ips[: deployment.nodes])
    return sorted(((p.node, p.argv, dict(sorted(p.env.items()))) for p in at.processes), key=repr)
