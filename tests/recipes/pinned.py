"""The pinned InferenceX store's whole sweep (tests/data/inferencex/configs, 1,820 jobs), expanded once in a
test process: four test modules read it, and each expansion renders every launch and deployment (2-4 s).
The jobs are only read, never changed."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from servelab.recipes.filters import Filters
from servelab.recipes.job import Job
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import expand

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "inferencex" / "configs"


@cache
def pinned_jobs() -> tuple[Job, ...]:
    return tuple(expand(open_store(CONFIGS), [], Filters(max_jobs=100_000)))
