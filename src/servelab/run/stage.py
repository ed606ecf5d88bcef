"""What every stage of `servelab run` is: a class with one signature, found by name in a registry.

The orchestrator (servelab.run.execute) starts or attaches to a server, then runs each stage row (stage x
config x repetition) of the plan by calling `Stage.run(target, call)`: the stage finds what it needs in the
plan (its bench point, lm-eval task or BFCL spec) through `call`. A stage returns its numeric metrics by name
(the names assertions use after the stage's prefix, as in `gsm8k.exact_match` or `bench.p99_ttft_ms`) and
the files it wrote. A stage that cannot produce its metrics (the server went away, the evaluation tool
crashed or is not installed) raises `StageFailed`: the run's outcome becomes error, and what earlier stages
measured is kept. `Stage.preflight` checks, before the server starts, that the stage can run at all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from servelab.results.schema import StageStatus

if TYPE_CHECKING:
    from servelab.bench.processes import WorkerPool
    from servelab.run.plan import RunPlan

__all__ = [
    "SERVER_STAGE",
    "Stage",
    "StageCall",
    "StageFailed",
    "StageName",
    "StageOptions",
    "StageOutput",
    "StageStatus",
    "Target",
]

# The store's row for starting (or attaching to) the server, beside the stages' own rows.
SERVER_STAGE = "server"


class StageName(StrEnum):
    """The stages a plan may hold, in the order a run runs them."""

    BENCH = "bench"
    GSM8K = "gsm8k"
    BFCL = "bfcl"


@dataclass(frozen=True)
class Target:
    """The OpenAI-compatible server under test."""

    base_url: str  # scheme://host:port, without /v1
    model: str  # the served model name, as /v1/models lists it
    api_key: str | None = field(default=None, repr=False)  # never logged or stored
    tokenizer: str | None = None  # local path or hub id for client-side token counting
    userinfo: str | None = field(default=None, repr=False)  # `user:password` of an attached URL; a secret

    def request_url(self) -> str:
        """The base URL with its credentials, for the clients that send them (never printed or stored)."""
        if not self.userinfo:
            return self.base_url
        scheme, sep, rest = self.base_url.partition("://")
        return f"{scheme}{sep}{self.userinfo}@{rest}"


@dataclass
class StageOutput:
    metrics: dict[str, float]
    units: dict[str, str] = field(default_factory=dict)  # metric name -> unit, where it has one
    artifacts: list[Path] = field(default_factory=list)  # raw outputs kept in the run folder


class StageFailed(Exception):
    """The stage ran but could not produce its metrics; the message says why in one line."""


@dataclass(frozen=True)
class StageOptions:
    """What the caller gives the eval stages beside the plan."""

    gsm8k_path: Path | None = None  # a local GSM8K JSONL file instead of the hub's
    bfcl_python: Path | None = None  # the BFCL environment's python (default: servelab.run.bfcl finds one)


@dataclass(frozen=True)
class StageCall:
    """One stage row to run: the plan it belongs to, its config and repetition, the run's folder, and the
    load worker processes the run's benches share (None: a bench starts its own)."""

    plan: RunPlan
    config: str
    repetition: int
    run_dir: Path
    options: StageOptions = StageOptions()
    workers: WorkerPool | None = None


class Stage(ABC):
    """One kind of stage. Subclasses name themselves and implement `run`; `preflight` is optional."""

    name: ClassVar[StageName]

    def preflight(self, plan: RunPlan, options: StageOptions) -> None:  # noqa: B027 (most stages need none)
        """Before the server starts: raise ServelabError (bad input) when this stage could not run."""

    @abstractmethod
    def run(self, target: Target, call: StageCall) -> StageOutput:
        """Run one stage row against the server; StageFailed when it cannot produce its metrics."""
