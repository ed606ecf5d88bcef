"""Torch-to-engine ratios: how much longer (or shorter) an engine's kernels take than servelab's torch
kernels, per op family, fitted where both were measured on the same keys.

An engine's own tables answer the keys they hold. For the rest of a family the engine prices a torch table's
answer times the ratio of the kernel that runs the key (the engine's default, or one it picks by key such as
vLLM's DeepGEMM MoE) for this family (source `calibrated`), where the ratio could be fitted: the geometric
median of engine / torch over that kernel's measured rows whose key the torch table answers from its data,
on the same system. The band is the ratio's leave-one-out error (each row predicted with a ratio fitted
without it: p10-p90 of measured / predicted - 1), so a family whose kernels differ from torch's by a
shape-dependent amount says so in its width. Families with fewer than MIN_ROWS such rows get no ratio.

The fitted ratios sit beside the tables they were fitted on (<root>/ratios/<backend>.json: package data
for the shipped tables), written by `servelab db fit`; perfdb.fitting holds the one fitting rule.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.errors import ServelabError
from servelab.perfdb.latency import OpLatency
from servelab.readable import factor

if TYPE_CHECKING:  # numpy imported when first used (servelab.lazy_numpy says why)
    import numpy as np
else:
    from servelab.lazy_numpy import np

MIN_ROWS = 5
TABLE_ANSWERS = ("measured", "interpolated", "extrapolated")


class FamilyRatio(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    ratio: float = Field(gt=0, description="engine / torch, geometric median over the rows")
    lo: float = Field(description="leave-one-out p10 of measured / predicted - 1")
    hi: float = Field(description="leave-one-out p90 of measured / predicted - 1")
    rows: int = Field(ge=MIN_ROWS)
    systems: list[str]


class RatioFile(BaseModel):
    """Per kernel (the engine's own tables, or a kernel it picks by key: vllm-deepgemm, ...) and op family."""

    model_config = ConfigDict(extra="forbid")
    backend: str
    provenance: str
    kernels: dict[str, dict[str, FamilyRatio]]

    def find(self, kernel: str, family: str) -> FamilyRatio | None:
        return self.kernels.get(kernel, {}).get(family)


def fit_family(engine_us: list[float], torch_us: list[float]) -> tuple[float, float, float] | None:
    """(ratio, lo, hi) from paired latencies, or None with fewer than MIN_ROWS pairs."""
    if len(engine_us) < MIN_ROWS:
        return None
    logs = np.log(np.asarray(engine_us) / np.asarray(torch_us))
    ratio = float(np.exp(np.median(logs)))
    errors = []
    for i in range(len(logs)):
        rest = np.delete(logs, i)
        errors.append(math.exp(logs[i] - float(np.median(rest))) - 1.0)
    lo, hi = np.quantile(errors, [0.1, 0.9])
    return ratio, min(float(lo), 0.0), max(float(hi), 0.0)


@cache
def read_ratios(backend: str, directory: Path) -> RatioFile | None:
    """An engine backend's ratios in a directory (<tables root>/ratios), or None where none were fitted."""
    path = directory / f"{backend}.json"
    if not path.is_file():
        return None
    try:
        return RatioFile.model_validate(json.loads(path.read_text()))
    except (ValueError, ValidationError) as e:
        raise ServelabError(f"{path}: not a ratio file servelab wrote ({str(e).splitlines()[0]})") from None


def scaled(torch: OpLatency, family: str, fit: FamilyRatio, kernel: str) -> OpLatency:
    """A torch answer as the engine's: times the family's ratio, its band widened by the ratio's error."""
    us = torch.us * fit.ratio
    low = torch.low_us * fit.ratio * (1.0 + fit.lo)
    high = torch.high_us * fit.ratio * (1.0 + fit.hi)
    note = (
        f"torch {torch.source} x {factor(fit.ratio)} ({kernel}/torch ratio of {family}, fitted on "
        f"{fit.rows} rows of {', '.join(fit.systems)}; band: torch's widened by the ratio's leave-one-out "
        f"{100 * fit.lo:+.0f} %/{100 * fit.hi:+.0f} %); {torch.note}"
    )
    return OpLatency(us, low, high, "calibrated", note)
