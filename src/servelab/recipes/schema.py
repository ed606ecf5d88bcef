"""servelab's recipe: an InferenceX config key plus everything InferenceX keeps in hand-written shell scripts.

A recipe file maps config keys to recipes, exactly like an InferenceX master YAML, so any InferenceX file is a
valid recipe file (the extra fields are all optional). What servelab adds is typed: engine arguments,
environment, image digest, model revision, accuracy evals with thresholds, metric assertions and client
settings. The launch command is rendered from these fields by an engine adapter (engines/), never written by
hand.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from servelab.recipes.inferencex import (
    TOLERANT,
    IxModel,
    MasterEntry,
    Notes,
    Scenarios,
    SearchSpaceEntry,
    SeqLenConfig,
)
from servelab.recipes.tokens import EnvName, ModelId, Name, PathStr, Revision, Text, check_text

DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
LatencyMetric = Literal["ttft", "tpot", "itl", "e2el"]  # vLLM's --percentile-metrics names
LATENCY_METRICS: tuple[LatencyMetric, ...] = ("ttft", "tpot", "itl", "e2el")


class KernelConfig(IxModel):
    """vLLM `--kernel-config`. Typed so that known fixes are visible and fingerprinted."""

    enable_jit_warmup: bool | None = Field(
        None,
        description="False turns off the generic FA4/MLA JIT warm-up; DeepSeek-V4 has no legacy MLA "
        "dimensions and the warm-up fails on it (seen serving dsv4-fp4-b200-vllm).",
    )
    model_config = IxModel.model_config | {"alias_generator": None}


class EngineArgs(IxModel):
    """Engine-neutral serving options; each adapter maps them to its flags or refuses what it cannot say."""

    kv_cache_dtype: Name | None = None
    block_size: int | None = Field(None, ge=1)
    moe_backend: Name | None = None
    attention_config: dict[Name, bool | int | float | Text] | None = Field(
        None, description="vLLM attention config, rendered as --attention_config.KEY=VALUE flags."
    )
    compilation_config: dict[str, Any] | None = Field(None, description="vLLM --compilation-config JSON.")
    kernel_config: KernelConfig | None = None
    cuda_home: PathStr | None = Field(
        None,
        description="Pins CUDA_HOME so JIT compilers (TileLang) use the system CUDA toolkit, not a pip nvcc "
        "whose headers do not match.",
    )
    tokenizer_mode: Name | None = None
    tool_call_parser: Name | None = None
    reasoning_parser: Name | None = None
    enable_auto_tool_choice: bool | None = Field(
        None, description="Defaults to on when tool-call-parser is set."
    )
    max_num_batched_tokens: int | None = Field(None, ge=1)
    max_num_seqs: int | None = Field(None, ge=1)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    enable_prefix_caching: bool | None = None
    max_model_len: int | None = Field(
        None, ge=1, description="Default: isl + osl + 256 per job (InferenceX)."
    )
    trust_remote_code: bool | None = None
    speculative_config: dict[str, Any] | None = None
    extra_options: dict[str, Any] | None = Field(
        None, description="TensorRT-LLM extra LLM API options (YAML file)."
    )
    extra_args: list[Text] = Field(
        default_factory=list,
        description="Flags with no typed field yet; appended verbatim and fingerprinted like any other.",
    )

    @model_validator(mode="after")
    def _configs(self) -> EngineArgs:
        # JSON-like configs reach launch commands and files: refuse control characters anywhere in them.
        for name in ("compilation_config", "speculative_config", "extra_options"):
            check_text(getattr(self, name), name.replace("_", "-"))
        return self


class SpecRef(IxModel):
    """Which servelab model spec validates this recipe, when the checkpoint id alone does not say."""

    model: ModelId
    weight_dtype: Name | None = None


class LmEval(IxModel):
    kind: Literal["lm-eval"] = "lm-eval"
    task: Name
    num_fewshot: int = Field(ge=0)
    num_concurrent: int | None = Field(None, ge=1)
    max_gen_toks: int | None = Field(None, ge=1)
    model_args: dict[Name, bool | int | float | Text | None] | None = Field(
        None,
        description="Further lm-eval local-completions model_args, as a perf-eval workload gives them "
        "(max_length, timeout, tokenized_requests, tokenizer_backend); written back by `--as workload`.",
    )
    metric: Text | None = Field(None, description="lm-eval metric key; default is the task's first metric.")
    threshold: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Pass when the metric is at least this (InferenceX GSM8K: 0.90, DSv4 0.91).",
    )


class Bfcl(IxModel):
    kind: Literal["bfcl"] = "bfcl"
    categories: list[Name] = Field(min_length=1)
    num_threads: int | None = Field(None, ge=1)
    threshold: float | None = Field(None, ge=0, le=1)


Eval = Annotated[LmEval | Bfcl, Field(discriminator="kind")]


class Bound(IxModel):
    """A pass/fail bound on one benchmark metric (e.g. mean_tpot_ms: {max: 2.5})."""

    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _one(self) -> Bound:
        if self.min is None and self.max is None:
            raise ValueError("a bound needs min or max")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self


class ClientSpec(IxModel):
    """How `servelab bench` drives each job. Defaults are InferenceX's benchmark script defaults
    (benchmarks/benchmark_lib.sh run_benchmark_serving, utils/bench_serving/benchmark_serving.py); the options
    a launch script chooses (request API, chat template, ...) come from its launch profile where these are
    None (recipes/engines/profiles.py; servelab.recipes.ix_client says which)."""

    num_prompts: int | None = Field(
        None, ge=1, description="Fixed prompt count; default conc x prompts-per-conc."
    )
    prompts_per_conc: int = Field(10, ge=1, description="InferenceX runs 10 prompts per unit of concurrency.")
    random_range_ratio: float = Field(0.8, ge=0, le=1, description="InferenceX's random-range-ratio.")
    random_range_rule: Literal["vllm", "inferencex"] = Field(
        "inferencex",
        description="How the range ratio r spreads a length L: inferencex, [int(L r), L] (InferenceX's "
        "client); vllm, [L(1 - r), L(1 + r)].",
    )
    warmups_per_conc: int = Field(2, ge=0, description="InferenceX warms up with 2 x concurrency requests.")
    ignore_eos: bool = True
    percentile_metrics: list[LatencyMetric] = Field(
        default_factory=lambda: list(LATENCY_METRICS),
        description="InferenceX passes ttft,tpot,itl,e2el.",
    )
    metric_percentiles: list[float] = Field(
        default_factory=lambda: [90.0, 99.0, 99.9],
        description="InferenceX's client default (it passes none): 90, 99, 99.9.",
    )
    backend: Literal["openai", "openai-chat", "vllm"] | None = Field(
        None, description="The request API; default: the launch script's, else servelab bench's."
    )
    endpoint: Text | None = Field(
        None, description="The API path; default: the launch script's, else bench's."
    )
    use_chat_template: bool | None = Field(
        None, description="Prompts in the tokenizer's chat template; default: as the launch script asks."
    )
    dsv4: bool | None = Field(
        None, description="DeepSeek-V4's chat framing; default: as the launch script asks."
    )
    trust_remote_code: bool | None = Field(
        None, description="Let the client's tokenizer run its own code; default: as the launch script asks."
    )
    tokenizer_mode: Name | None = Field(None, description="vLLM's --tokenizer-mode; default: the script's.")
    port: int = Field(8000, ge=1, le=65535)
    result_dir: PathStr = "results"


class RecipeSeqLen(SeqLenConfig):
    """A seq-len block; `name` and `num-prompts` carry perf-eval workload configs through import."""

    name: Name | None = None
    num_prompts: int | None = Field(None, ge=1)


class RecipeScenarios(Scenarios):
    fixed_seq_len: list[RecipeSeqLen] | None = None  # type: ignore[assignment]  # narrows the seq-len blocks


class Recipe(MasterEntry):
    """One config key: the InferenceX fields plus typed launch, pins, evals and assertions."""

    scenarios: RecipeScenarios  # type: ignore[assignment]  # narrows the entry's seq-len blocks
    description: str | None = None
    image_digest: str | None = None
    revision: Revision | None = None
    spec: SpecRef | None = None
    engine: EngineArgs = Field(default_factory=EngineArgs)
    env: dict[EnvName, Text] = Field(default_factory=dict)
    secret_env: list[EnvName] = Field(
        default_factory=list,
        description="Names of secrets (e.g. HF_TOKEN) the runner must provide; only names are stored or "
        "hashed.",
    )
    evals: list[Eval] = Field(default_factory=list)
    assertions: dict[str, Bound] = Field(default_factory=dict)
    client: ClientSpec = Field(default_factory=ClientSpec)
    nightly: bool | None = None
    gpu_profile: Name | None = Field(None, description="perf-eval workload `gpu:` key this recipe came from.")

    @field_validator("image_digest")
    @classmethod
    def _digest(cls, v: str | None) -> str | None:
        if v is not None and not DIGEST_RE.fullmatch(v):
            raise ValueError("image-digest must look like sha256:<64 hex digits>")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if is_secret_name(name):
                raise ValueError(
                    f"env {name} looks like a secret; secrets come from the runner's environment, "
                    "never a recipe"
                )
        return v

    @model_validator(mode="after")
    def _cuda_home(self) -> Recipe:
        pinned = self.engine.cuda_home
        if pinned and "CUDA_HOME" in self.env and self.env["CUDA_HOME"] != pinned:
            raise ValueError(f"env CUDA_HOME={self.env['CUDA_HOME']} contradicts engine.cuda-home={pinned}")
        return self

    def to_master(self) -> MasterEntry:
        """The InferenceX view: only the fields InferenceX has (servelab extras cannot be expressed there)."""
        data = self.dump()
        keep = set(MasterEntry.model_fields)
        # fields kept from a tolerant read (inferencex.py) are InferenceX's too: they go back as written
        ix = {k: v for k, v in data.items() if k.replace("-", "_") in keep or k in self._passthrough}
        for seq in ix["scenarios"].get("fixed-seq-len") or []:
            seq.pop("name", None)
            seq.pop("num-prompts", None)
        # validated already, strictly or tolerantly as its file was read: what was kept stays, unnoted here
        return MasterEntry.model_validate(ix, context={TOLERANT: Notes()})


def is_secret_name(name: str) -> bool:
    up = name.upper()
    return any(word in up for word in ("TOKEN", "KEY", "SECRET"))


__all__ = [
    "Bfcl",
    "Bound",
    "ClientSpec",
    "EngineArgs",
    "KernelConfig",
    "LmEval",
    "Recipe",
    "RecipeScenarios",
    "RecipeSeqLen",
    "SearchSpaceEntry",
    "SpecRef",
    "is_secret_name",
]
