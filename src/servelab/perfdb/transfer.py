"""Measured rows carried to a system that has none: another system's answer scaled by the ratio of the two
systems' rooflines for that very key (flops, bytes, the tile shapes each GPU runs), times a per-family
efficiency fitted where both systems were measured on the same keys.

The roofline ratio carries what the datasheets know (B200's FP8 rate, H200's bandwidth): both rooflines are
priced with the source system's efficiencies (its fitted fractions of peak and launch floor), so a target
without fitted efficiencies of its own does not move the ratio with its defaults; the fitted
efficiency carries what they do not (how close each GPU's kernels get to their peak), as the geometric median
of measured / transferred over the shared keys, with its leave-one-out error as the band. Where no two
systems share measured keys of a family the efficiency is 1 and the band is DEFAULT_BAND, an assumption the
note says. The answer's source is `transferred`, and its note names the system it came from.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.errors import ServelabError
from servelab.perfdb.latency import OpLatency
from servelab.perfdb.ratios import fit_family
from servelab.readable import factor

# how far a transferred time may be off where no fit says (an assumption, not a measurement): the H200
# tables' own roofline fit leaves 20-40 % per op family at p10/p90, and the datasheet ratio of two GPUs
# adds its own
DEFAULT_BAND = (-0.35, 0.35)


class TransferFit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str
    target: str
    backend: str  # the tables' backend on both systems
    family: str
    efficiency: float = Field(gt=0, description="measured / (source x roofline ratio), geometric median")
    lo: float
    hi: float
    rows: int


class TransferFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provenance: str
    fits: list[TransferFit]

    def find(self, source: str, target: str, backend: str, family: str) -> TransferFit | None:
        """The fit for these systems and family with this backend, else with any backend (an efficiency
        says how near a GPU's kernels get to its peak, which the torch tables measure for every backend)."""
        same = [f for f in self.fits if (f.source, f.target, f.family) == (source, target, family)]
        return next((f for f in same if f.backend == backend), same[0] if same else None)


def fit_pairs(
    source_us: list[float], source_roof: list[float], target_us: list[float], target_roof: list[float]
) -> tuple[float, float, float] | None:
    """(efficiency, lo, hi) from the same keys measured on two systems, or None with too few keys."""
    carried = [s * tr / sr for s, sr, tr in zip(source_us, source_roof, target_roof, strict=True)]
    return fit_family(target_us, carried)


@cache
def read_transfer(path: Path) -> TransferFile:
    """The transfer fits beside a root's tables (<root>/transfer.json); none where the file is absent."""
    if not path.is_file():
        return TransferFile(provenance="none fitted", fits=[])
    try:
        return TransferFile.model_validate(json.loads(path.read_text()))
    except (ValueError, ValidationError) as e:
        raise ServelabError(
            f"{path}: not a transfer file servelab wrote ({str(e).splitlines()[0]})"
        ) from None


def transferred(
    answer: OpLatency,
    source: str,
    source_roof_us: float,
    target_roof_us: float,
    fit: TransferFit | None,
) -> OpLatency:
    """`answer` (from `source`'s tables) carried to a system whose roofline prices the key target_roof_us."""
    ratio = target_roof_us / source_roof_us if source_roof_us > 0 else 1.0
    eff, lo, hi, how = _carried_by(fit)
    scale = ratio * eff
    note = (
        f"transferred from {source} ({answer.source}, x{factor(ratio)} roofline ratio; {how}); {answer.note}"
    )
    return OpLatency(
        answer.us * scale,
        answer.low_us * scale * (1 + lo),
        answer.high_us * scale * (1 + hi),
        "transferred",
        note,
    )


@cache
def _carried_by(fit: TransferFit | None) -> tuple[float, float, float, str]:
    """(efficiency, lo, hi, how the note says it) of a fit, or of none: the same for every key a fit
    carries, so worded once (a cold plan carries thousands of keys)."""
    if fit is not None:
        eff = factor(fit.efficiency)
        how = f"efficiency {eff} fitted on {fit.rows} keys measured on both, leave-one-out band"
        return fit.efficiency, fit.lo, fit.hi, how
    lo, hi = DEFAULT_BAND
    how = f"no keys measured on both systems: efficiency 1, assumed band {100 * lo:+.0f} %/{100 * hi:+.0f} %"
    return 1.0, lo, hi, how
