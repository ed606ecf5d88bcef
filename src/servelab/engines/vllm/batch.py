"""vLLM's default step budget and running-sequence cap for `vllm serve`, by GPU and release
(batch_defaults.json beside this module: the rule of each range of releases, with where it was read), and
whether the release schedules asynchronously by default."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field, model_validator

from servelab.engines.version import Version, numbered_release


class Tier(BaseModel):
    """GPUs of at least min_gib GiB whose name contains none of not_gpus (lower case) get these defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    min_gib: float = Field(ge=0)
    not_gpus: tuple[str, ...] = ()
    max_num_batched_tokens: int = Field(ge=1)
    max_num_seqs: int = Field(ge=1)

    def takes(self, gpu_gib: float, gpu_name: str) -> bool:
        return gpu_gib >= self.min_gib and not any(n in gpu_name.lower() for n in self.not_gpus)


class Rule(BaseModel):
    """The tiers of the releases from..to (both read), first match wins."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    first: str = Field(alias="from")
    last: str = Field(alias="to")
    citation: str
    tiers: tuple[Tier, ...]

    @model_validator(mode="after")
    def _floor(self) -> Rule:
        if not self.tiers or self.tiers[-1].min_gib != 0 or self.tiers[-1].not_gpus:
            raise ValueError(f"{self.first}-{self.last}: the last tier must take every GPU (min_gib 0)")
        return self

    @property
    def releases(self) -> str:
        return f"vLLM {self.first}-{self.last}"


class BatchDefaults(BaseModel):
    """The defaults that apply, and a line saying which rule and tier gave them."""

    model_config = ConfigDict(frozen=True)
    max_num_batched_tokens: int
    max_num_seqs: int
    why: str


@cache
def rules() -> tuple[Rule, ...]:
    """The rules, oldest releases first."""
    data = json.loads((resources.files("servelab.engines.vllm") / "batch_defaults.json").read_text())
    return tuple(sorted((Rule.model_validate(r) for r in data["rules"]), key=lambda r: Version(r.first)))


def rule_for(version: str | None) -> tuple[Rule, str]:
    """The rule of a release and how it was chosen: its own range's; the newest for an unknown or newer
    release (a nightly or custom build too), the oldest read for an older one (vLLM before 0.10 was not
    read), each said in the note."""
    known = rules()
    key = numbered_release(version)  # an image tag or version string; None for a nightly or custom build
    if key is None:
        said = f"release {version!r} names no release number" if version else "release not known"
        return known[-1], f"{said}: the newest rule ({known[-1].releases})"
    for rule in known:
        if Version(rule.first) <= key <= Version(rule.last):
            return rule, f"{rule.releases} rule"
    if key > Version(known[-1].last):
        return known[-1], f"{version} is newer than the releases read: the {known[-1].releases} rule"
    if key < Version(known[0].first):
        return known[0], f"{version} is older than the releases read: the {known[0].releases} rule"
    # between two ranges (a release not read): the older range's rule, which it most likely still had
    older = max((r for r in known if Version(r.last) < key), key=lambda r: Version(r.last))
    return older, f"{version} not read: the {older.releases} rule"


def batch_defaults(gpu_gib: float, gpu_name: str = "", version: str | None = None) -> BatchDefaults:
    """What `vllm serve` takes for max_num_batched_tokens and max_num_seqs on a GPU of gpu_gib GiB (per
    device) named gpu_name, for the release `version` (None: not known)."""
    rule, how = rule_for(version)
    for tier in rule.tiers:
        if tier.takes(gpu_gib, gpu_name):
            bound = f">= {tier.min_gib:g} GiB" if tier.min_gib else "the smallest tier"
            bound += f", not {'/'.join(tier.not_gpus)}" if tier.not_gpus else ""
            return BatchDefaults(
                max_num_batched_tokens=tier.max_num_batched_tokens,
                max_num_seqs=tier.max_num_seqs,
                why=f"{how}, {bound}: {tier.max_num_batched_tokens} tokens, {tier.max_num_seqs} seqs "
                f"(vllm/engine/arg_utils.py)",
            )
    raise AssertionError(rule.releases)  # unreachable: the last tier takes every GPU (Rule._floor)


# The first release whose engine schedules asynchronously unless told not to: SchedulerConfig.async_scheduling
# defaults to None there and VllmConfig.__post_init__ turns None into True where no option excludes it
# (vllm/config/scheduler.py and vllm/config/vllm.py of vllm-0.14.0.tar.gz, sha256
# ed86c6a9d22fbfd059648794493cad88444c71688f3ff6efcb26c5ca353f0e5d); 0.12.0 and 0.13.0 default it to False
# (read in their sdists), as 0.11 did.
ASYNC_SCHEDULING_FROM = "0.14.0"


def async_scheduling_default(version: str | None) -> tuple[bool, str]:
    """Whether `vllm serve` of the release `version` schedules asynchronously when the command does not say
    (None, a nightly or a custom build: as the newest releases, on), and a line saying why."""
    release = numbered_release(version)
    if release is None:
        return True, f"async scheduling on (the default from vLLM {ASYNC_SCHEDULING_FROM}; release not known)"
    if release >= Version(ASYNC_SCHEDULING_FROM):
        return True, f"async scheduling on (the default from vLLM {ASYNC_SCHEDULING_FROM})"
    return False, f"async scheduling off (vLLM {release} predates its default, {ASYNC_SCHEDULING_FROM})"


# The first release whose scheduler admits a request only when its whole prompt fits the free KV cache
# (SchedulerConfig.scheduler_reserve_full_isl, default True, vllm/config/scheduler.py of vllm-0.19.0.tar.gz,
# sha256 81e59cf87175e7a6...; absent from 0.17.0, 0.17.1, 0.18.0 and 0.18.1, read in their sdists; still True
# in 0.25.0 and 0.32.0).
RESERVE_FULL_PROMPT_FROM = "0.19.0"


def reserve_full_prompt_default(version: str | None) -> tuple[bool, str]:
    """Whether `vllm serve` of the release `version` admits a request only when its whole prompt fits the free
    KV cache (None, a nightly or a custom build: as the newest releases, yes), and a line saying why."""
    release = numbered_release(version)
    said = "whole-prompt admission (scheduler_reserve_full_isl, the default from vLLM "
    said += RESERVE_FULL_PROMPT_FROM
    if release is None:
        return True, f"{said}; release not known)"
    if release >= Version(RESERVE_FULL_PROMPT_FROM):
        return True, f"{said})"
    return False, f"first-chunk admission (vLLM {release} predates scheduler_reserve_full_isl)"
