"""Which kernel an engine runs for an op, by key, GPU and engine release, as data.

An engine picks some ops' kernels by shape, weight dtype, GPU and version (vLLM's DeepGEMM MoE for block-FP8
experts, its Marlin path for MXFP4 experts on Hopper, ...). Each such kernel has perf tables of its own (a
perf-table backend directory beside the engine's); a `KernelChoice` says which keys it runs, so the price of
an op is read from the kernel that really runs it. Choices are read by attribute from an op key (perfdb's
NamedTuples), so this module needs nothing of perfdb.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from servelab.engines.version import Version


@dataclass(frozen=True)
class KernelChoice:
    """A kernel that runs `op` for the keys and GPUs it matches, from engine release `since` (inclusive) to
    `until` (exclusive); `table`: the perf-table backend directory that times it."""

    table: str
    op: str
    dtypes: frozenset[str]
    why: str
    multiple_of: tuple[tuple[str, int], ...] = ()  # key fields that must be multiples (N, K for DeepGEMM)
    since: str | None = None
    until: str | None = None
    compute_capabilities: frozenset[int] = frozenset()  # empty: every GPU

    def runs(
        self, key: object, version: Version | None = None, compute_capability: int | None = None
    ) -> bool:
        """Whether the engine runs this kernel for `key` (an op key), at `version` (None: the newest release)
        on a GPU of `compute_capability` (None: any)."""
        if str(getattr(key, "op", "")) != self.op or getattr(key, "dtype", None) not in self.dtypes:
            return False
        if any(getattr(key, name) % step for name, step in self.multiple_of):
            return False
        if self.compute_capabilities and compute_capability is not None:
            if compute_capability not in self.compute_capabilities:
                return False
        return self.applies_at(version)

    def applies_at(self, version: Version | None) -> bool:
        if version is None:
            return self.until is None
        if self.since is not None and version < _release(self.since):
            return False
        return self.until is None or version < _release(self.until)


@cache
def _release(text: str) -> Version:
    """A choice's release bound, parsed once: a PerfDB asks `runs` several times for every key it resolves
    (tens of thousands a plan), and parsing a release took most of each call."""
    return Version(text)
