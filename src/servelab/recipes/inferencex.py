"""InferenceX master-config schema, read as it is (hyphenated keys, unknown fields rejected).

These models describe exactly what an InferenceX master YAML may hold, so that importing and exporting a file
loses nothing: `dump_master(load_master(text))` gives back the same mapping. servelab's own `Recipe` extends
the entry with what InferenceX keeps in shell scripts (see schema.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servelab.errors import ServelabError
from servelab.recipes.tokens import ImageRef, Label, ModelId, Name, Setting, config_key
from servelab.recipes.yamlio import load_yaml


def _hyphen(name: str) -> str:
    return name.replace("_", "-")


class IxModel(BaseModel):
    """Base for user-written files: hyphenated keys, unknown fields rejected."""

    model_config = ConfigDict(extra="forbid", alias_generator=_hyphen, populate_by_name=True)

    def dump(self) -> dict:
        """The mapping as a user would write it: hyphenated keys, only what was set."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


SpecDecoding = Literal["mtp", "draft_model", "none"]

# Upper bounds that no deployment reaches, so that a typo (or an attack) fails at load time instead of
# rendering a 20-digit --tensor-parallel-size: GPUs per parallel group, concurrent requests, tokens.
MAX_PARALLEL = 4096
MAX_CONC = 1_000_000
MAX_SEQ_LEN = 10_000_000
ParallelSize = Annotated[int, Field(ge=1, le=MAX_PARALLEL)]
Concurrency = Annotated[int, Field(ge=1, le=MAX_CONC)]
SeqLen = Annotated[int, Field(ge=1, le=MAX_SEQ_LEN)]


class WorkerSpec(IxModel):
    """One side (prefill or decode) of a disaggregated, multinode search-space entry."""

    num_worker: ParallelSize = 1
    tp: ParallelSize = 1
    ep: ParallelSize = 1
    dp_attn: bool = False
    pp: ParallelSize = 1
    additional_settings: list[Setting] | None = None


class SearchSpaceEntry(IxModel):
    """One arm of a sweep: a parallel layout plus a concurrency ladder or list."""

    tp: ParallelSize | None = None
    ep: ParallelSize | None = None
    dp_attn: bool | None = None
    pp: ParallelSize | None = None
    dcp_size: ParallelSize | None = None
    pcp_size: ParallelSize | None = None
    spec_decoding: SpecDecoding | None = None
    conc_start: Concurrency | None = None
    conc_end: Concurrency | None = None
    conc_list: list[Concurrency] | None = None
    prefill: WorkerSpec | None = None
    decode: WorkerSpec | None = None

    @model_validator(mode="after")
    def _check(self) -> SearchSpaceEntry:
        has_range = self.conc_start is not None or self.conc_end is not None
        if has_range and self.conc_list is not None:
            raise ValueError("give either conc-start/conc-end or conc-list, not both")
        if has_range and (self.conc_start is None or self.conc_end is None):
            raise ValueError("conc-start and conc-end go together")
        if not has_range and self.conc_list is None:
            raise ValueError("a concurrency is required: conc-start/conc-end or conc-list")
        if self.conc_start is not None and self.conc_end is not None and self.conc_start > self.conc_end:
            raise ValueError(f"conc-start {self.conc_start} is above conc-end {self.conc_end}")
        if self.conc_list is not None and (not self.conc_list or min(self.conc_list) < 1):
            raise ValueError("conc-list must hold positive integers")
        if self.dcp_size and self.dcp_size > 1 and self.tp_ % self.dcp_size:
            raise ValueError(f"dcp-size {self.dcp_size} must divide tp {self.tp_}")
        if (self.prefill is None) != (self.decode is None):
            raise ValueError("a disaggregated entry needs both prefill: and decode:")
        return self

    # Effective values (InferenceX defaults) for fields the user may leave out.
    @property
    def tp_(self) -> int:
        return self.tp or 1

    @property
    def ep_(self) -> int:
        return self.ep or 1

    @property
    def pp_(self) -> int:
        return self.pp or 1

    @property
    def dp_attn_(self) -> bool:
        return bool(self.dp_attn)

    @property
    def spec_(self) -> str:
        return self.spec_decoding or "none"

    @property
    def disagg(self) -> bool:
        return self.prefill is not None


class SeqLenConfig(IxModel):
    isl: SeqLen
    osl: SeqLen
    search_space: list[SearchSpaceEntry] = Field(min_length=1)


class MasterEntry(IxModel):
    """One config key of an InferenceX master YAML."""

    image: ImageRef
    model: ModelId
    model_prefix: Name
    runner: Label
    precision: Name
    framework: Name
    multinode: bool = False
    disagg: bool | None = None
    scenarios: dict[Name, list[SeqLenConfig]]

    @model_validator(mode="after")
    def _check_multinode(self) -> MasterEntry:
        if not any(self.scenarios.values()):
            raise ValueError("scenarios: needs at least one seq-len block")
        for kind, seqs in self.scenarios.items():
            for seq in seqs:
                for i, arm in enumerate(seq.search_space):
                    if arm.disagg and not self.multinode:
                        raise ValueError(
                            f"scenarios.{kind} search-space[{i}]: prefill/decode needs multinode: true"
                        )
                    if self.multinode and not arm.disagg:
                        raise ValueError(
                            f"scenarios.{kind} search-space[{i}]: multinode entries need prefill/decode"
                        )
        return self


def parse_master(data: object, source: str) -> dict[str, MasterEntry]:
    if not isinstance(data, dict):
        raise ServelabError(f"{source}: expected a mapping of config keys to entries")
    out = {}
    for raw_key, entry in data.items():
        key = config_key(raw_key, source)
        try:
            out[key] = MasterEntry.model_validate(entry)
        except ValidationError as e:
            raise ServelabError.from_validation(e, f"{source}: {key}") from None
    return out


def load_master(text: str, source: str = "<master yaml>") -> dict[str, MasterEntry]:
    return parse_master(load_yaml(text, source), source)


def dump_master(entries: dict[str, MasterEntry]) -> dict:
    return {key: entry.dump() for key, entry in entries.items()}
