"""InferenceX master-config schema, read as it is (hyphenated keys, unknown fields rejected).

These models describe exactly what an InferenceX master YAML may hold (upstream's own rules are in
SemiAnalysisAI/InferenceX utils/matrix_logic/validation.py and configs/CONFIGS.md), so that importing and
exporting a file loses nothing: `dump_master(load_master(text))` gives back the same mapping. Defaults are
upstream's. servelab's own `Recipe` extends the entry with what InferenceX keeps in shell scripts (schema.py).

Read strictly (the default), a name outside the known sets or an unknown field is refused, which catches
typos in files servelab's users write. An InferenceX checkout is read tolerantly (validation context
`{"notes": Notes()}`, as the recipe store reads `*-master.yaml`): upstream types those names as free strings
and adds fields as it goes, so a name servelab does not know is kept as written and an unknown field is kept
beside the model (written back by `dump`), each reported once in the notes; the rows are upstream's either
way, and a job that would need servelab to act on such a value says `not-renderable` with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    model_serializer,
    model_validator,
)

from servelab.errors import ServelabError, closest
from servelab.recipes.tokens import ImageRef, Label, ModelId, Name, Setting, Text, config_key
from servelab.recipes.yamlio import load_yaml


def _hyphen(name: str) -> str:
    return name.replace("_", "-")


class Notes:
    """What a tolerant read kept without a meaning for servelab: one line per distinct thing, in order."""

    def __init__(self) -> None:
        self._lines: dict[str, None] = {}

    def add(self, line: str) -> None:
        self._lines.setdefault(line, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._lines)

    def __len__(self) -> int:
        return len(self._lines)


TOLERANT = "notes"  # the validation-context key that makes a read tolerant


def notes_of(info: ValidationInfo | None) -> Notes | None:
    """The notes of a tolerant read, or None when the read is strict."""
    context = info.context if info is not None else None
    found = context.get(TOLERANT) if isinstance(context, dict) else None
    return found if isinstance(found, Notes) else None


class IxModel(BaseModel):
    """Base for user-written files: hyphenated keys, unknown fields rejected (kept and noted when read
    tolerantly)."""

    model_config = ConfigDict(extra="forbid", alias_generator=_hyphen, populate_by_name=True)
    _passthrough: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _pass_through(cls, data: Any, handler: ModelWrapValidatorHandler, info: ValidationInfo) -> Any:
        notes = notes_of(info)
        if notes is None:
            return handler(data)
        data, kept = cls.read_older(data, notes)
        if not isinstance(data, dict):
            return handler(data)
        known = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
        unknown = {k: v for k, v in data.items() if k not in known}
        if not unknown and not kept:
            return handler(data)
        for name in unknown:
            notes.add(f"field {name!r} is not one servelab knows; kept as written")
        model = handler({k: v for k, v in data.items() if k in known})
        model._passthrough = kept | unknown
        return model

    @classmethod
    def read_older(cls, data: Any, notes: Notes) -> tuple[Any, dict[str, Any]]:
        """The data in the current schema when it is in an older one InferenceX used (tolerant reads), and
        what is kept as written beside the model because servelab cannot read it."""
        return data, {}

    @model_serializer(mode="wrap")
    def _with_passthrough(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        if self._passthrough and isinstance(out, dict):
            out.update(self._passthrough)
        return out

    def dump(self) -> dict:
        """The mapping as a user would write it: hyphenated keys, only what was set."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


def _known(what: str, names: tuple[str, ...]) -> Callable[[Any, ValidationInfo], Any]:
    """A check that a value is one of `names`; the message says so on one line and suggests the closest.
    Read tolerantly, another printable name is kept as written, with a note."""

    def check(value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str) and value in names:
            return value
        notes = notes_of(info)
        if notes is not None and isinstance(value, str) and value.isprintable() and value.strip():
            noun = what.removeprefix("a ").removesuffix(" InferenceX runs")
            notes.add(f"{noun} {value!r} is not one servelab knows; kept as written")
            return value
        hint = closest(value, list(names)) if isinstance(value, str) and value.isprintable() else ""
        raise ValueError(f"{value!r} is not {what} ({', '.join(names)}){hint}")

    return check


# The names InferenceX's master files and benchmark scripts use (upstream types them as free strings; a
# closed set catches typos in strict reads, a tolerant read keeps any other name with a note). `trtllm` is
# servelab's adapter name for InferenceX's `trt`.
FrameworkName = Literal[
    "vllm",
    "sglang",
    "trt",
    "trtllm",
    "atom",
    "tilert",
    "dynamo-vllm",
    "dynamo-sglang",
    "dynamo-trt",
    "llmd-vllm",
    "sglang-disagg",
    "atom-disagg",
]
RouterName = Literal[
    "dynamo-router", "sglang-router", "vllm-router", "llm-d-router", "tilert-pd-router", "atomesh", "infera"
]
TransferName = Literal["nixl", "mooncake", "ucx", "mori", "moriio"]
OffloadBackendName = Literal["native", "vllm-simple", "vllm-native", "hicache", "lmcache", "mooncake", "umbp"]
ScenarioType = Literal["fixed-seq-len", "agentic-coding"]
SpecDecoding = Literal["mtp", "draft_model", "none"]
KvOffloading = Literal["none", "dram"]

FRAMEWORKS: tuple[str, ...] = get_args(FrameworkName)
SCENARIO_TYPES: tuple[str, ...] = get_args(ScenarioType)
# Typed as str: a tolerant read keeps names outside the sets (the checks refuse them in strict reads).
Framework = Annotated[str, BeforeValidator(_known("a framework InferenceX runs", FRAMEWORKS))]
Router = Annotated[str, BeforeValidator(_known("a router", get_args(RouterName)))]
Transfer = Annotated[str, BeforeValidator(_known("a KV transfer engine", get_args(TransferName)))]
OffloadBackend = Annotated[str, BeforeValidator(_known("a KV offload backend", get_args(OffloadBackendName)))]

# Agentic configs run on one exact fleet (InferenceX refuses broad SKU labels for them).
CLUSTER_PREFIX = "cluster:"

# Upper bounds that no deployment reaches, so that a typo (or an attack) fails at load time instead of
# rendering a 20-digit --tensor-parallel-size: GPUs per parallel group, concurrent requests, tokens.
MAX_PARALLEL = 4096
MAX_CONC = 1_000_000
MAX_SEQ_LEN = 10_000_000
ParallelSize = Annotated[int, Field(ge=1, le=MAX_PARALLEL)]
# pp, dcp-size and pcp-size are strict upstream: 2.0 or "2" is refused.
StrictSize = Annotated[int, Field(ge=1, le=MAX_PARALLEL, strict=True)]
Concurrency = Annotated[int, Field(ge=1, le=MAX_CONC)]
SeqLen = Annotated[int, Field(ge=1, le=MAX_SEQ_LEN)]


def _own_version(version: str) -> str:
    if version.startswith("image:"):
        raise ValueError("a component version is its release, package version or commit, not an image")
    return version


Version = Annotated[Text, Field(min_length=1), AfterValidator(_own_version)]


class Component(IxModel):
    """A router: its name and exact release, package version or source commit."""

    name: Router
    version: Version


class OffloadBackendSpec(IxModel):
    """Where KV is offloaded to; the version is optional for framework-native backends (vLLM, HiCache)."""

    name: OffloadBackend
    version: Version | None = None

    _bare: bool = PrivateAttr(default=False)  # written as a bare name: printed and written back so

    @classmethod
    def read_older(cls, data: Any, notes: Notes) -> tuple[Any, dict[str, Any]]:
        if isinstance(data, str):
            # InferenceX's schema until July 2026 named the backend alone (kv-offload-backend: native)
            notes.add(
                "kv-offload-backend given as a bare name (InferenceX's form before July 2026): "
                "read as {name: ...}"
            )
            return {"name": data}, {}
        return data, {}

    @model_validator(mode="wrap")
    @classmethod
    def _remember_bare(cls, data: Any, handler: ModelWrapValidatorHandler, info: ValidationInfo) -> Any:
        model = handler(data)
        if isinstance(data, str) and isinstance(model, OffloadBackendSpec):
            model._bare = True  # upstream's generator prints the value as written, a name alone then
        return model

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> Any:
        return self.name if self._bare else self._with_passthrough(handler)


def _check_dcp(tp: int | None, dcp_size: int) -> None:
    # Decode context parallelism reuses the TP GPUs.
    if tp is not None and tp % dcp_size:
        raise ValueError(f"dcp-size {dcp_size} must divide tp {tp}")


class WorkerSpec(IxModel):
    """One side (prefill or decode) of a multinode search-space entry; a pool holds
    num-worker x tp x pp x pcp-size GPUs."""

    num_worker: Annotated[int, Field(ge=0, le=MAX_PARALLEL)]
    tp: ParallelSize
    pp: StrictSize = 1
    dcp_size: StrictSize = 1
    pcp_size: StrictSize = 1
    ep: ParallelSize
    dp_attn: bool
    hardware: Name | None = Field(None, description="GPU SKU of a heterogeneous pool; both sides or neither.")
    additional_settings: list[Setting] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> WorkerSpec:
        _check_dcp(self.tp, self.dcp_size)
        return self


class SearchSpaceEntry(IxModel):
    """One arm of a sweep: a single-node layout (tp, ...) or prefill/decode pools, and a concurrency ladder
    or list."""

    # Fields that a multinode arm sets per worker instead.
    SINGLE_NODE_ONLY: ClassVar[tuple[str, ...]] = ("tp", "pp", "dcp_size", "pcp_size", "ep", "dp_attn")

    tp: ParallelSize | None = None
    pp: StrictSize = 1
    dcp_size: StrictSize = 1
    pcp_size: StrictSize = 1
    ep: ParallelSize | None = None
    dp_attn: bool | None = None
    spec_decoding: SpecDecoding = "none"
    prefill: WorkerSpec | None = None
    decode: WorkerSpec | None = None
    router: Component | None = None
    kv_p2p_transfer: Transfer | None = None
    conc_start: Concurrency | None = None
    conc_end: Concurrency | None = None
    conc_list: list[Concurrency] | None = None

    @model_validator(mode="after")
    def _check(self) -> SearchSpaceEntry:
        has_range = self.conc_start is not None or self.conc_end is not None
        if has_range and self.conc_list is not None:
            raise ValueError("give either conc-start/conc-end or conc-list, not both")
        if has_range and (self.conc_start is None or self.conc_end is None):
            raise ValueError("conc-start and conc-end go together")
        if not has_range and not self.conc_list:
            raise ValueError("a concurrency is required: conc-start/conc-end or conc-list")
        if self.conc_start is not None and self.conc_end is not None and self.conc_start > self.conc_end:
            raise ValueError(f"conc-start {self.conc_start} is above conc-end {self.conc_end}")
        if (self.prefill is None) != (self.decode is None):
            raise ValueError("a multinode entry needs both prefill: and decode:")
        if self.prefill is not None and self.decode is not None:
            single = [_hyphen(f) for f in self.SINGLE_NODE_ONLY if f in self.model_fields_set]
            if single:
                raise ValueError(f"a prefill/decode entry sets {', '.join(single)} per worker, not here")
            if (self.prefill.hardware is None) != (self.decode.hardware is None):
                raise ValueError("hardware: is given for both prefill and decode, or neither")
        elif self.tp is None:
            raise ValueError("an entry needs tp (single node) or prefill: and decode: (multinode)")
        _check_dcp(self.tp, self.dcp_size)
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
        return self.pp

    @property
    def dp_attn_(self) -> bool:
        return bool(self.dp_attn)

    @property
    def spec_(self) -> str:
        return self.spec_decoding

    @property
    def disagg(self) -> bool:
        """Whether the arm is split into prefill and decode pools (a multinode arm)."""
        return self.prefill is not None


class AgenticSearchSpaceEntry(SearchSpaceEntry):
    """An arm of an agentic-coding (trace replay) scenario: a search-space entry plus KV offloading."""

    # Upstream lets agentic multinode arms carry ep and dp-attn beside the pools.
    SINGLE_NODE_ONLY: ClassVar[tuple[str, ...]] = ("tp", "pp", "dcp_size", "pcp_size")

    kv_offloading: KvOffloading | None = None
    kv_offload_backend: OffloadBackendSpec | None = None

    @model_validator(mode="after")
    def _offload(self) -> AgenticSearchSpaceEntry:
        if self.kv_offloading is None and not self.disagg:
            raise ValueError("a single-node agentic entry needs kv-offloading (none or dram)")
        offloads = self.kv_offloading not in (None, "none")
        if self.kv_offload_backend is not None and not offloads:
            raise ValueError("kv-offload-backend needs kv-offloading other than none")
        if offloads and self.kv_offload_backend is None:
            raise ValueError(f"kv-offloading {self.kv_offloading} needs kv-offload-backend")
        return self


class SeqLenConfig(IxModel):
    """A fixed-seq-len block: input and output lengths and the arms run at them."""

    isl: SeqLen
    osl: SeqLen
    search_space: list[SearchSpaceEntry] = Field(min_length=1)


class AgenticConfig(IxModel):
    """An agentic-coding block: trace replay, so no fixed lengths; dram-utilization sizes DRAM KV offload
    (a share of the runner's CPU DRAM, from runners.yaml `hardware:`)."""

    search_space: list[AgenticSearchSpaceEntry] = Field(min_length=1)
    dram_utilization: float | None = Field(None, gt=0, le=1)

    @model_validator(mode="after")
    def _dram(self) -> AgenticConfig:
        if self.dram_utilization is None and any(a.kv_offloading == "dram" for a in self.search_space):
            raise ValueError("kv-offloading dram needs dram-utilization")
        return self


class OlderAgenticArm(SearchSpaceEntry):
    """An arm of an agentic-coding block in InferenceX's form before June 2026: a search-space entry and the
    tier KV is offloaded to (`offloading:` none, cpu, ssd, lmcache, hicache; upstream kept it a free string),
    which today's form splits into kv-offloading and kv-offload-backend."""

    SINGLE_NODE_ONLY: ClassVar[tuple[str, ...]] = AgenticSearchSpaceEntry.SINGLE_NODE_ONLY

    offloading: Name = "none"


class OlderAgenticConfig(IxModel):
    """An agentic-coding block in InferenceX's form before June 2026: its arms and how long each replay ran
    (`duration:` seconds, 1800 when not given, as that form's generator read it)."""

    search_space: list[OlderAgenticArm] = Field(min_length=1)
    duration: Annotated[int, Field(ge=1)] = 1800


# The key a tolerant read files older agentic blocks under (read_older); never one a file may hold.
OLDER_AGENTIC = "agentic-coding (before June 2026)"


class Scenarios(IxModel):
    """The benchmark scenarios of a config key; at least one."""

    fixed_seq_len: list[SeqLenConfig] | None = None
    agentic_coding: list[AgenticConfig] | None = None
    # agentic-coding blocks in InferenceX's form before June 2026 (read tolerantly; written back as they were)
    older_agentic: list[OlderAgenticConfig] | None = Field(None, alias=OLDER_AGENTIC, exclude=True)

    @classmethod
    def read_older(cls, data: Any, notes: Notes) -> tuple[Any, dict[str, Any]]:
        blocks = data.get("agentic-coding") if isinstance(data, dict) else None
        blocks_ = [b for b in blocks or [] if isinstance(b, dict)]
        arms = [a for b in blocks_ for a in b.get("search-space") or [] if isinstance(a, dict)]
        today = any("kv-offloading" in a for a in arms) or any("dram-utilization" in b for b in blocks_)
        older = any("offloading" in a for a in arms) or any("duration" in b for b in blocks_)
        if older and not today:
            # InferenceX's agentic schema until June 2026 (offloading: per arm, duration: per block): read in
            # that form, printed as its generator printed it (matrix.py), written back as it was
            notes.add(
                "agentic-coding blocks in InferenceX's form before June 2026 (offloading:, duration:): "
                "read in that form"
            )
            rest = {k: v for k, v in data.items() if k != "agentic-coding"}
            return {**rest, OLDER_AGENTIC: blocks}, {"agentic-coding": blocks}
        return data, {}

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict):
            for name in data:
                if name != OLDER_AGENTIC or notes_of(info) is None:
                    _known("a scenario type", SCENARIO_TYPES)(name, info)
        return data

    @model_validator(mode="after")
    def _one(self, info: ValidationInfo) -> Scenarios:
        # a tolerant read may hold no block servelab reads (upstream's validator refuses that, not its reader)
        has_blocks = self.fixed_seq_len or self.agentic_coding or self.older_agentic
        if not has_blocks and notes_of(info) is None:
            raise ValueError("scenarios: needs at least one fixed-seq-len or agentic-coding block")
        return self

    def items(self) -> Iterator[tuple[str, list[Any]]]:
        """(scenario type, blocks) for each scenario given, in file order."""
        for name in SCENARIO_TYPES:
            blocks = getattr(self, name.replace("-", "_"))
            if blocks:
                yield name, blocks


class MasterEntry(IxModel):
    """One config key of an InferenceX master YAML."""

    image: ImageRef
    model: ModelId
    model_prefix: Name
    runner: Label
    precision: Name
    framework: Framework
    multinode: bool = False
    disagg: bool = False
    router: Component | None = None
    kv_p2p_transfer: Transfer | None = None
    scenarios: Scenarios

    @classmethod
    def read_older(cls, data: Any, notes: Notes) -> tuple[Any, dict[str, Any]]:
        if isinstance(data, dict) and "scenarios" not in data and "seq-len-configs" in data:
            # InferenceX's schema until April 2026: the fixed-seq-len blocks at the top level
            notes.add(
                "seq-len-configs (InferenceX's form before April 2026): read as scenarios.fixed-seq-len"
            )
            rest = {k: v for k, v in data.items() if k != "seq-len-configs"}
            return {**rest, "scenarios": {"fixed-seq-len": data["seq-len-configs"]}}, {}
        return data, {}

    def arms(self) -> Iterator[tuple[str, Any, int, SearchSpaceEntry]]:
        """(scenario type, block, arm index, arm) for every search-space entry, in file order."""
        for kind, blocks in self.scenarios.items():
            for block in blocks:
                for i, arm in enumerate(block.search_space):
                    yield kind, block, i, arm

    @model_validator(mode="after")
    def _check_entry(self, info: ValidationInfo) -> MasterEntry:
        if self.disagg and not self.multinode:
            raise ValueError("disagg: true needs multinode: true")
        if self.kv_p2p_transfer is not None and not self.multinode:
            raise ValueError("kv-p2p-transfer needs multinode: true")
        if self.scenarios.agentic_coding and not self.runner.startswith(CLUSTER_PREFIX):
            why = f"agentic-coding runs on one exact fleet: runner must be a {CLUSTER_PREFIX}<name> label"
            notes = notes_of(info)
            if notes is None:
                raise ValueError(why)
            # InferenceX's validator added this rule in mid-2026
            notes.add(f"{why} (InferenceX's validator before mid-2026 did not ask for it); kept as written")
        arms = list(self.arms())
        for kind, _, i, arm in arms:
            if arm.disagg and not self.multinode:
                raise ValueError(f"scenarios.{kind} search-space[{i}]: prefill/decode needs multinode: true")
            if self.multinode and not arm.disagg:
                raise ValueError(f"scenarios.{kind} search-space[{i}]: multinode entries need prefill/decode")
            if arm.kv_p2p_transfer is not None and not self.multinode:
                raise ValueError(f"scenarios.{kind} search-space[{i}]: kv-p2p-transfer needs multinode: true")
        for name in ("router", "kv_p2p_transfer"):
            if getattr(self, name) is not None and any(getattr(a, name) is not None for *_, a in arms):
                raise ValueError(
                    f"{_hyphen(name)} is declared at the top level or in search-space entries, not both"
                )
        if self.disagg and self.kv_p2p_transfer is None and any(a.kv_p2p_transfer is None for *_, a in arms):
            why = "disagg: true needs kv-p2p-transfer at the top level or in every search-space entry"
            notes = notes_of(info)
            if notes is None:
                raise ValueError(why)
            # InferenceX's validator added this rule in mid-2026; checkouts from before it omit the engine.
            notes.add(f"{why} (InferenceX's validator before mid-2026 did not ask for it); kept as written")
        return self


Entry = TypeVar("Entry", bound=BaseModel)


def validate_entries(
    data: object, source: str, model: type[Entry], what: str, notes: Notes | None = None
) -> dict[str, Entry]:
    """A file's mapping of config keys to `what` (entries, recipes), each validated as `model`; with `notes`,
    read tolerantly (module docstring)."""
    if not isinstance(data, dict):
        raise ServelabError(f"{source}: expected a mapping of config keys to {what}")
    out = {}
    context = None if notes is None else {TOLERANT: notes}
    for raw_key, entry in data.items():
        key = config_key(raw_key, source)
        try:
            out[key] = model.model_validate(entry, context=context)
        except ValidationError as e:
            raise ServelabError.from_validation(e, f"{source}: {key}") from None
    return out


def parse_master(data: object, source: str, notes: Notes | None = None) -> dict[str, MasterEntry]:
    """The entries of a master file; with `notes`, read tolerantly (module docstring)."""
    return validate_entries(data, source, MasterEntry, "entries", notes)


def load_master(text: str, source: str = "<master yaml>") -> dict[str, MasterEntry]:
    return parse_master(load_yaml(text, source), source)


def dump_master(entries: dict[str, MasterEntry]) -> dict:
    return {key: entry.dump() for key, entry in entries.items()}
