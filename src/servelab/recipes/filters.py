"""Sweep filters: which jobs of the selected recipes a sweep keeps, as InferenceX's generator has them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from servelab.recipes.inferencex import Concurrency, ParallelSize

# InferenceX's whole nvidia master expands to about 2,500 jobs; GitHub takes 256 per matrix.
MAX_JOBS = 10_000


class Filters(BaseModel):
    """Which jobs a sweep keeps; `servelab sweep` takes its options from these fields."""

    mode: Literal["full-sweep", "test-config"] = Field(
        "full-sweep", description="full-sweep | test-config (keys required, explicit concurrencies allowed)."
    )
    model_prefix: list[str] = Field(default_factory=list)
    precision: list[str] = Field(default_factory=list)
    framework: list[str] = Field(default_factory=list)
    runner: list[str] = Field(default_factory=list, description="Runner labels or globs.")
    seq_lens: list[str] = Field(default_factory=list, description="Seq-len names such as 8k1k.")
    scenario_type: list[str] = Field(default_factory=list)
    node_type: Literal["single-node", "multi-node"] | None = Field(
        None, description="single-node | multi-node"
    )
    min_conc: Concurrency | None = None
    max_conc: Concurrency | None = None
    max_tp: ParallelSize | None = None
    max_ep: ParallelSize | None = None
    conc: list[Concurrency] = Field(
        default_factory=list, description="test-config: exactly these concurrencies."
    )
    step_size: int = Field(2, ge=2, le=1024, description="Ladder factor (doubling by default).")
    lowest_conc: bool = Field(False, description="Keep only the lowest concurrency of each arm.")
    evals_only: bool = Field(False, description="Only rows marked to run evals.")
    all_evals: bool = Field(False, description="Every row runs evals.")
    no_evals: bool = Field(False, description="No row runs evals.")
    max_jobs: int = Field(
        MAX_JOBS, ge=1, description="Refuse a sweep that expands to more jobs than this (a runaway recipe)."
    )
