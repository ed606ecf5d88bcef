"""data/inferencex_recipes.json read through its model: per engine, model and system, the settings each
version of an InferenceX recipe script set, in the engine's own words, and the dates it was in use (written
by scripts/inferencex_recipes.py; calibrate/recipes.py resolves them for a row's load).

A setting is a value, "conc" (the client concurrency), a multiple of the input length, {"isl_times": k} (the
script's `$((ISL * k))`), a multiple of the concurrency, {"conc_times": k} (`$((CONC * k))`), or a branch on
the load, {"when": {"isl": I, "osl": O}, "then": A, "else": B}, as the script's `if` around its launch. A
range may name the precision of the rows it ran (`precision`), where one system has a script per precision.
A malformed file is one line naming the file and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.specs import ENGINE_KV_CACHE_DTYPES, Dtype
from servelab.specs.attention import STATE_DTYPES

RECIPES_FILE = Path(str(resources.files("servelab.calibrate") / "data" / "inferencex_recipes.json"))


@dataclass(frozen=True)
class Load:
    """What a recipe's settings may depend on: the row's split and load."""

    tp: int
    dp_attn: bool
    concurrency: int
    isl: int
    osl: int


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# bool before int before float, each strict: a JSON true stays a bool, 1 an int, 0.9 a float
Scalar = Annotated[StrictBool | StrictInt | StrictFloat | StrictStr | None, Field(union_mode="left_to_right")]


class Branch(_Data):
    """A setting the script chose by the load (`when` holds Load fields and the values that pick `then`)."""

    when: dict[Literal["tp", "dp_attn", "concurrency", "isl", "osl"], int]
    then: Setting
    otherwise: Setting = Field(alias="else")


class IslTimes(_Data):
    """A count the script wrote as a multiple of the job's input length (`$((ISL * 2))`)."""

    isl_times: int = Field(ge=1)


class ConcTimes(_Data):
    """A count the script wrote as a multiple of the client concurrency (`$((CONC * 2))`)."""

    conc_times: int = Field(ge=1)


# a value, "conc", a multiple of the input length or of the concurrency, a branch, or (the settings a script
# recorded) a mapping of values
Setting = Annotated[
    Branch | IslTimes | ConcTimes | Scalar | dict[str, Scalar], Field(union_mode="left_to_right")
]
Branch.model_rebuild()


def pick(value: Setting, load: Load) -> Any:
    """A setting for this load: a branch resolved by the load, "conc" the client concurrency, a multiple of
    the input length (or of the concurrency) that many times the row's nominal input length (its
    concurrency), anything else itself."""
    if isinstance(value, Branch):
        hit = all(getattr(load, key) == want for key, want in value.when.items())
        return pick(value.then if hit else value.otherwise, load)
    if isinstance(value, IslTimes):
        return value.isl_times * load.isl
    if isinstance(value, ConcTimes):
        return value.conc_times * load.concurrency
    return load.concurrency if value == "conc" else value


def kv_dtype(name: str | None) -> Dtype | None:
    if name is None:
        return None
    if name not in ENGINE_KV_CACHE_DTYPES:
        raise ValueError(f"recipe KV-cache dtype {name} has no servelab dtype")
    return ENGINE_KV_CACHE_DTYPES[name]


def state_dtype(name: str | None) -> Dtype | None:
    if name is None:
        return None
    if name not in STATE_DTYPES:
        raise ValueError(f"recipe --mamba-ssm-dtype {name} has no servelab dtype")
    return STATE_DTYPES[name]


class FixedTokens(_Data):
    fixed: int


class VariableTokens(_Data):
    """A job-level variable of the script, which the rows do not record."""

    variable: str


class RoundedTokens(_Data):
    """concurrency + isl + conc_plus_isl_plus, rounded up to round_up_to, at least at_least."""

    conc_plus_isl_plus: int
    round_up_to: int = Field(ge=1)
    at_least: int | None


TokensRule = FixedTokens | VariableTokens | RoundedTokens


def tokens(rule: TokensRule | None, concurrency: int, isl: int) -> int | None:
    """TensorRT-LLM's max_num_tokens from the recipe's rule (a job-level variable: None)."""
    if rule is None or isinstance(rule, VariableTokens):
        return None
    if isinstance(rule, FixedTokens):
        return rule.fixed
    step = rule.round_up_to
    n = -(-(concurrency + isl + rule.conc_plus_isl_plus) // step) * step
    return max(n, rule.at_least or 0)


class DpBalance(_Data):
    timeout_iters: int
    batching_wait_iters: int


class BatchWaitWhen(_Data):
    isl: int
    osl: int
    tp_below: int


class BatchWait(_Data):
    timeout_iters: int
    max_tokens_ratio: float
    when: BatchWaitWhen


class TrtllmSettings(_Data):
    max_num_tokens: TokensRule | None = None
    kv_memory_fraction: float | None = None
    max_batch_size: Setting = None
    cuda_graph_max_batch: Setting = None
    kv_cache_dtype: str | None = None
    attention_dp_balance: DpBalance | None = None
    batch_wait: BatchWait | None = None
    stream_interval: int | None = None
    moe_backend: str | None = None

    def resolve(self, load: Load) -> dict:
        balance = self.attention_dp_balance if load.dp_attn else None
        wait = self.batch_wait
        if wait and not (
            wait.when.isl == load.isl and wait.when.osl == load.osl and load.tp < wait.when.tp_below
        ):
            wait = None
        return dict(
            max_num_batched_tokens=tokens(self.max_num_tokens, load.concurrency, load.isl),
            memory_share=self.kv_memory_fraction,
            max_num_seqs=pick(self.max_batch_size, load),
            cuda_graph_max_batch=pick(self.cuda_graph_max_batch, load),
            kv_cache_dtype=kv_dtype(self.kv_cache_dtype),
            attention_dp_balance=balance is not None,
            attention_dp_timeout_iters=balance.timeout_iters if balance else None,
            attention_dp_batching_wait_iters=balance.batching_wait_iters if balance else None,
            batch_wait_timeout_iters=wait.timeout_iters if wait else 0,
            batch_wait_max_tokens_ratio=wait.max_tokens_ratio if wait else 0.0,
            stream_interval=self.stream_interval,
            unpriced=(("moe_backend", self.moe_backend),) if self.moe_backend else (),
        )


def _recorded(recorded: Setting, load: Load) -> dict:
    """The settings the script recorded as written (a whole mapping where its branches differ)."""
    return pick(recorded, load) or {}


class SglangSettings(_Data):
    chunked_prefill_size: Setting = None
    max_prefill_tokens: Setting = None
    max_running_requests: Setting = None
    cuda_graph_max_bs: Setting = None
    mem_fraction_static: Setting = None
    kv_cache_dtype: Setting = None  # --kv-cache-dtype (fp8_e4m3 in InferenceX's GLM-5 B200 script)
    mamba_ssm_dtype: Setting = (
        None  # --mamba-ssm-dtype (bfloat16 in InferenceX's Qwen3.5 FP8 and FP4 scripts)
    )
    recorded: Setting = None

    def resolve(self, load: Load) -> dict:
        recorded = _recorded(self.recorded, load)
        return dict(
            max_num_batched_tokens=pick(self.chunked_prefill_size, load),
            max_prefill_tokens=pick(self.max_prefill_tokens, load),
            max_num_seqs=pick(self.max_running_requests, load),
            cuda_graph_max_batch=pick(self.cuda_graph_max_bs, load),
            memory_share=pick(self.mem_fraction_static, load),
            kv_cache_dtype=kv_dtype(pick(self.kv_cache_dtype, load)),
            state_dtype=state_dtype(pick(self.mamba_ssm_dtype, load)),
            stream_interval=recorded.get("stream_interval"),
            unpriced=tuple(sorted((k, v) for k, v in recorded.items() if k != "stream_interval")),
        )


class VllmSettings(_Data):
    max_num_batched_tokens: Setting = None
    max_num_seqs: Setting = None
    max_cudagraph_capture_size: Setting = None
    gpu_memory_utilization: Setting = None
    kv_cache_dtype: Setting = None
    expert_parallel: Setting = None  # true: the launch enabled expert parallelism for every job
    recorded: Setting = None

    def resolve(self, load: Load) -> dict:
        recorded = _recorded(self.recorded, load)
        interval = recorded.get("stream_interval")
        interval = interval if isinstance(interval, int) else None  # one set from a job's variable: recorded
        return dict(
            expert_parallel=pick(self.expert_parallel, load),
            max_num_batched_tokens=pick(self.max_num_batched_tokens, load),
            max_num_seqs=pick(self.max_num_seqs, load),
            cuda_graph_max_batch=pick(self.max_cudagraph_capture_size, load),
            memory_share=pick(self.gpu_memory_utilization, load),
            kv_cache_dtype=kv_dtype(pick(self.kv_cache_dtype, load)),
            stream_interval=interval,
            unpriced=tuple(
                sorted((k, v) for k, v in recorded.items() if k != "stream_interval" or interval is None)
            ),
        )


class ScriptVersion(_Data):
    commit: str
    date: str
    file: str


class _Range(_Data):
    """One range of dates [from, until) over which a script's settings stayed the same."""

    models: list[str]
    system: str
    precision: str | None = None  # the rows' precision column this script ran (None: every row's)
    start: str = Field(alias="from")
    until: str | None
    versions: list[ScriptVersion] = Field(min_length=1)

    def in_use(self, date: str) -> ScriptVersion:
        """The script version in use on `date` (the range starts at its first version)."""
        return [v for v in self.versions if v.date <= date][-1]


class TrtllmRange(_Range):
    engine: Literal[Engine.TRTLLM]
    settings: TrtllmSettings


class SglangRange(_Range):
    engine: Literal[Engine.SGLANG]
    settings: SglangSettings


class VllmRange(_Range):
    engine: Literal[Engine.VLLM]
    settings: VllmSettings


RecipeRange = Annotated[TrtllmRange | SglangRange | VllmRange, Field(discriminator="engine")]


class RecipeTable(_Data):
    provenance: str = Field(alias="_provenance")
    inferencex_head: str
    recipes: list[RecipeRange]


def read_recipe_table(path: Path = RECIPES_FILE) -> RecipeTable:
    """The table in `path`; one line naming the file and the field where it is not what the generator
    writes."""
    try:
        return RecipeTable.model_validate(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError) as e:
        raise ServelabError(f"{path}: cannot read the recipe table ({e})") from None
    except ValidationError as e:
        raise ServelabError.from_validation(e, str(path)) from None


@cache
def recipe_table() -> RecipeTable:
    return read_recipe_table()
