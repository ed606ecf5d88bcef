"""What every stage of `servelab run` is given and gives back.

The orchestrator (servelab.run) starts or attaches to a server, then calls each stage with a `Target`.
A stage returns its numeric metrics by name (the names assertions use after the stage's prefix, as in
`gsm8k.exact_match` or `bench.p99_ttft_ms`) and the files it wrote. A stage that cannot produce its
metrics (the server went away, the evaluation tool crashed or is not installed) raises `StageFailed`: the
run's outcome becomes error, and what earlier stages measured is kept.
"""

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Target:
    """The OpenAI-compatible server under test."""

    base_url: str  # scheme://host:port, without /v1
    model: str  # the served model name, as /v1/models lists it
    api_key: str | None = field(default=None, repr=False)  # never logged or stored
    tokenizer: str | None = None  # local path or hub id for client-side token counting


@dataclass
class StageOutput:
    metrics: dict[str, float]
    units: dict[str, str] = field(default_factory=dict)  # metric name -> unit, where it has one
    artifacts: list[Path] = field(default_factory=list)  # raw outputs kept in the run folder


class StageFailed(Exception):
    """The stage ran but could not produce its metrics; the message says why in one line."""
