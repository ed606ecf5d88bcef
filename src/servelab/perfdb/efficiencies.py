"""perfdb/data/efficiencies.json read through its model: the fraction of the datasheet peak each op family
reaches, by default and per fitted system (`servelab calibrate roofline` writes a system's entry).

A system's entry replaces the defaults key by key (a whole `gemm_compute` at once), and a system spec's own
`efficiencies` (a system fitted outside this file) replace those in turn. A malformed file is one line
naming the file and the field.

Which entry a system prices with (`fit_for`): its own; else, for an NVIDIA GPU with no shipped tables (B200,
B300, GB200, GB300, RTX PRO 6000), REFERENCE_SYSTEM's, as the file's provenance says ("other systems reuse the
H200 fractions until they have tables of their own"). That fit's launch floor and fractions of peak were
fitted to kernels timed on a CUDA GPU; the defaults are the datasheet-derived start of that fit, kept as such
for the interpolation reference (perfdb.reference). With the defaults a B200 decode step of DeepSeek-R1
(about 1,000 small kernels) paid a 4 us floor a kernel against the H200's fitted 2 us, and its kernels cost
more than the same step's on an H200, whose HBM is 1.6x slower. A system with shipped tables but no fit
(h100_sxm) keeps the defaults until `servelab calibrate roofline` fits it, and so does an AMD GPU (HIP
kernels: no measurement says their floor is a CUDA one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.errors import ServelabError
from servelab.specs import SystemSpec

DATA = Path(str(resources.files("servelab.perfdb") / "data"))
EFFICIENCIES_FILE = DATA / "efficiencies.json"
# the system whose fit a system without tables of its own borrows: the one fitted to shipped tables
REFERENCE_SYSTEM = "h200_sxm"


class Efficiencies(BaseModel):
    """The efficiencies a roofline prices with, complete."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gemm_compute: dict[str, float] = Field(description="by compute dtype (bf16, fp8, fp4)")
    attention_compute: float
    memory: float
    kernel_us: float = Field(description="the launch floor of one kernel")
    band_low: float
    band_high: float
    tile_quantized: bool = Field(True, description="a partial 128-wide GEMM tile costs a whole one")

    def over(self, overrides: Mapping[str, Any], where: str = "efficiencies") -> Efficiencies:
        """These with `overrides` (field name -> value) put over them; one line naming the field otherwise."""
        if not overrides:
            return self
        try:
            return Efficiencies.model_validate(self.model_dump(exclude_unset=True) | dict(overrides))
        except ValidationError as e:
            raise ServelabError.from_validation(e, where) from None


class SystemFit(BaseModel):
    """One system's fitted entry: the values that replace the defaults, and how they were fitted."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    gemm_compute: dict[str, float] | None = None
    attention_compute: float | None = None
    memory: float | None = None
    kernel_us: float | None = None
    band_low: float | None = None
    band_high: float | None = None
    tile_quantized: bool | None = None
    provenance: dict[str, Any] | None = Field(None, alias="_provenance")

    def values(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True, exclude={"provenance"})


class EfficienciesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    provenance: str = Field(alias="_provenance")
    default: Efficiencies
    systems: dict[str, SystemFit] = Field(default_factory=dict)

    def text(self) -> str:
        """The file as written: the keys it holds, in their order."""
        return json.dumps(self.model_dump(by_alias=True, exclude_unset=True), indent=1) + "\n"

    def with_system(self, name: str, entry: Mapping[str, Any]) -> EfficienciesFile:
        """The file with `name`'s entry replaced by `entry` (the other systems kept)."""
        data = self.model_dump(by_alias=True, exclude_unset=True)
        data["systems"] = {**data.get("systems", {}), name: dict(entry)}
        return _validated(data, f"efficiencies entry for {name}")


def _validated(data: Any, where: str) -> EfficienciesFile:
    try:
        return EfficienciesFile.model_validate(data)
    except ValidationError as e:
        raise ServelabError.from_validation(e, where) from None


def read_efficiencies(path: Path = EFFICIENCIES_FILE) -> EfficienciesFile:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ServelabError(f"{path}: cannot read the efficiencies ({e})") from None
    return _validated(data, str(path))


@lru_cache(maxsize=1)
def _fitted() -> frozenset[str]:
    return frozenset(read_efficiencies().systems)


def has_shipped_tables(system_name: str) -> bool:
    """Whether servelab ships perf tables of the system (perfdb/data/<system>/)."""
    return (DATA / system_name).is_dir()


def fit_for(system: SystemSpec) -> str:
    """The system whose shipped entry `system` prices with: its own, or REFERENCE_SYSTEM's for an NVIDIA GPU
    (one with a CUDA compute capability) without a fit or shipped tables (the module docstring says why)."""
    if system.name in _fitted() or has_shipped_tables(system.name) or not system.compute_capability:
        return system.name
    return REFERENCE_SYSTEM


@lru_cache(maxsize=16)  # one entry per system asked for, plus the defaults ("")
def efficiencies(system_name: str) -> Efficiencies:
    """The shipped efficiencies of a system: its fitted entry over the defaults ("" or unfitted: the
    defaults)."""
    f = read_efficiencies()
    entry = f.systems.get(system_name)
    return (
        f.default if entry is None else f.default.over(entry.values(), f"{EFFICIENCIES_FILE}: {system_name}")
    )
