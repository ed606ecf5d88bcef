"""Sweep filters: which rows of the selected recipes a sweep keeps, with the meaning InferenceX's generator
(`generate_sweep_configs.py full-sweep | test-config`) gives each option of the same name."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from servelab.recipes.inferencex import Concurrency, ParallelSize, ScenarioType
from servelab.recipes.ladder import parse_seq_len
from servelab.recipes.tokens import Name

# InferenceX's whole nvidia master expands to about 2,500 jobs; GitHub takes 256 per matrix.
MAX_JOBS = 10_000


class Filters(BaseModel):
    """Which rows a sweep keeps; `servelab sweep` takes its options from these fields."""

    mode: Literal["full-sweep", "test-config"] = Field(
        "full-sweep",
        description="full-sweep (filters below) | test-config (keys required, each must match; --conc).",
    )
    model_prefix: list[str] = Field(
        default_factory=list, description="Config keys starting with this (InferenceX matches the key)."
    )
    precision: list[str] = Field(default_factory=list, description="Precisions, e.g. fp8, fp4.")
    framework: list[str] = Field(
        default_factory=list, description="Frameworks as recipes name them, e.g. vllm, sglang, trt."
    )
    runner_type: list[str] = Field(
        default_factory=list, description="Runner labels (globs allowed); each must name a label."
    )
    runner_node_filter: Name | None = Field(
        None,
        description="One row per node of the runner whose name holds this text (the row's runner is the "
        "node).",
    )
    seq_lens: list[str] = Field(default_factory=list, description="Seq-len names such as 1k1k, 8k1k.")
    scenario_type: list[ScenarioType] = Field(
        default_factory=list, description="fixed-seq-len | agentic-coding (InferenceX's scenario-type)."
    )
    node_type: Literal["single-node", "multi-node"] | None = Field(
        None, description="single-node | multi-node"
    )
    min_conc: Concurrency | None = Field(
        None, description="Single-node ladders restart at this bound; lists and other arms are filtered."
    )
    max_conc: Concurrency | None = Field(
        None, description="Ladders are clamped to this cap; an arm entirely above it runs at the cap."
    )
    max_tp: ParallelSize | None = Field(None, description="Drop single-node arms with a larger tp.")
    max_ep: ParallelSize | None = Field(None, description="Clamp single-node ep to this value.")
    conc: list[Concurrency] = Field(
        default_factory=list, description="test-config: only these concurrencies of each arm."
    )
    step_size: int = Field(2, ge=2, le=1024, description="Ladder factor (doubling by default).")
    lowest_conc: bool = Field(False, description="Keep only the lowest concurrency of each arm.")
    evals_only: bool = Field(False, description="Only rows marked to run evals (marked eval-only).")
    all_evals: bool = Field(
        False, description="Every 8k1k and agentic row runs evals; only those rows are kept (eval-only)."
    )
    no_evals: bool = Field(False, description="No row runs evals.")
    max_jobs: int = Field(
        MAX_JOBS, ge=1, description="Refuse a sweep that expands to more jobs than this (a runaway recipe)."
    )

    @field_validator("seq_lens")
    @classmethod
    def _seq_lens(cls, names: list[str]) -> list[str]:
        for name in names:
            parse_seq_len(name)
        return names

    @model_validator(mode="after")
    def _consistent(self) -> Filters:
        if self.min_conc is not None and self.max_conc is not None and self.min_conc > self.max_conc:
            raise ValueError(f"min-conc {self.min_conc} is above max-conc {self.max_conc}")
        if self.no_evals and (self.evals_only or self.all_evals):
            raise ValueError("no-evals cannot be combined with evals-only or all-evals")
        if self.conc and self.mode != "test-config":
            raise ValueError("conc (explicit concurrencies) is for test-config mode; full sweeps use ladders")
        return self
