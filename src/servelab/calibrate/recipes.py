"""The engine settings a calibration row was measured with, from the recipe that ran it.

InferenceX measured many rows of silicon_sample.csv (TensorRT-LLM's, SGLang's DeepSeek-R1, vLLM's gpt-oss-120b
and Llama-3.1-70B on H200), each with the recipe script of that date. data/inferencex_recipes.json (made by
scripts/inferencex_recipes.py from InferenceX's git history; its `_provenance` names the commit) lists, per
engine, model and system, the settings each version of the script set, in the engine's own words, and the
dates it was in use. A row with a measured date inside a range is replayed with that range's settings,
resolved here for its load and split into what the simulator prices; a row without one keeps the engine's
defaults. Settings whose effect is not modelled are carried in `unpriced`.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources

from servelab.specs import ENGINE_KV_CACHE_DTYPES, Dtype

# InferenceX's client draws every input and output length uniform in [int(L x r), L] for the nominal length L
# (utils/bench_serving/benchmark_serving.py `sample_uniform`, as the bench_serving fork its first scripts
# cloned did), with the workflow's random-range-ratio r, 0.8 by default (.github/workflows/benchmark-tmpl.yml)
INFERENCEX_RANGE_RATIO = 0.8


@dataclass(frozen=True)
class RunSettings:
    """What the recipe set for one row, resolved for its load and split (None: the engine's default)."""

    recipe: str  # the script version in use on the row's date, and its range of equal settings
    # the token budget of a step: TensorRT-LLM max_num_tokens, SGLang chunked_prefill_size, vLLM's own name
    max_num_batched_tokens: int | None = None
    # SGLang: a prefill batch takes no more requests once this many new tokens are in it
    max_prefill_tokens: int | None = None
    # TensorRT-LLM max_batch_size, SGLang max_running_requests, vLLM's own name
    max_num_seqs: int | None = None
    cuda_graph_max_batch: int | None = None
    # TensorRT-LLM free_gpu_memory_fraction (of the memory left free), vLLM gpu_memory_utilization, SGLang
    # mem_fraction_static (each priced by its engine's KV rule, predict.memory.memory_per_gpu)
    memory_share: float | None = None
    kv_cache_dtype: Dtype | None = None
    attention_dp_balance: bool = False
    attention_dp_timeout_iters: int | None = None
    attention_dp_batching_wait_iters: int | None = None
    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    stream_interval: int | None = None  # recorded, not priced: its effect on the first token is unverified
    unpriced: tuple[tuple[str, object], ...] = ()  # other settings recorded as the recipe wrote them
    # the client's lengths: uniform in [L x r, L] (InferenceX's rule; None: the replay's own spread)
    client_range_ratio: float | None = None

    def engine_overrides(self, token_budget: int) -> dict:
        """EngineProfile fields these settings replace (`token_budget`: the engine's default budget).

        SGLang's prefill batch is cut at chunked_prefill_size (the last request chunked) and stops taking
        requests once max_prefill_tokens are in it (PrefillAdder in python/sglang/srt/managers/
        schedule_policy.py, 0.5.9); with one token budget the simulator takes the smaller of the two, which
        is exact where max_prefill_tokens is the larger (SGLang's defaults, InferenceX's recipes) and close
        for prompts shorter than it otherwise."""
        budget = self.max_num_batched_tokens
        if self.max_prefill_tokens is not None:
            budget = min(budget or token_budget, self.max_prefill_tokens)
        fields = {
            "max_num_batched_tokens": budget,
            "max_num_seqs": self.max_num_seqs,
            "cuda_graph_max_batch": self.cuda_graph_max_batch,
            "attention_dp_balance": self.attention_dp_balance or None,
            "attention_dp_timeout_iters": self.attention_dp_timeout_iters,
            "attention_dp_batching_wait_iters": self.attention_dp_batching_wait_iters,
            "batch_wait_timeout_iters": self.batch_wait_timeout_iters or None,
            "batch_wait_max_tokens_ratio": self.batch_wait_max_tokens_ratio or None,
        }
        return {k: v for k, v in fields.items() if v is not None}


@dataclass(frozen=True)
class Load:
    """What a recipe's settings may depend on: the row's split and load."""

    tp: int
    dp_attn: bool
    concurrency: int
    isl: int
    osl: int


@cache
def recipe_table() -> tuple[dict, ...]:
    text = (resources.files("servelab.calibrate") / "data" / "inferencex_recipes.json").read_text()
    return tuple(json.loads(text)["recipes"])


def find_recipe(engine: str, model: str, system: str, date: str) -> dict | None:
    """The recipe range in use on `date` (YYYY-MM-DD) for this engine, model name and system, or None."""
    for r in recipe_table():
        if r["engine"] != engine or model not in r["models"] or r["system"] != system:
            continue
        if r["from"] <= date and (r["until"] is None or date < r["until"]):
            return r
    return None


def _pick(value, load: Load):
    """A setting for this load: {"when": {"isl": I, "osl": O}, "then": A, "else": B} picks by the lengths
    (the script's `if` around its launch), "conc" is the client concurrency, anything else is itself."""
    if isinstance(value, dict) and "when" in value:
        hit = all(getattr(load, key) == want for key, want in value["when"].items())
        return _pick(value["then"] if hit else value["else"], load)
    return load.concurrency if value == "conc" else value


def _kv_dtype(name: str | None) -> Dtype | None:
    if name is None:
        return None
    if name not in ENGINE_KV_CACHE_DTYPES:
        raise ValueError(f"recipe KV-cache dtype {name} has no servelab dtype")
    return ENGINE_KV_CACHE_DTYPES[name]


def _tokens(rule: dict | None, concurrency: int, isl: int) -> int | None:
    """TensorRT-LLM's max_num_tokens from the recipe's rule (a job-level variable the rows do not record:
    None)."""
    if not rule or "variable" in rule:
        return None
    if "fixed" in rule:
        return int(rule["fixed"])
    step = rule["round_up_to"]
    tokens = -(-(concurrency + isl + rule["conc_plus_isl_plus"]) // step) * step
    return max(tokens, rule["at_least"] or 0)


def _trtllm(s: dict, load: Load) -> dict:
    balance = s["attention_dp_balance"] if load.dp_attn else None
    wait = s["batch_wait"]
    if wait and not (
        wait["when"]["isl"] == load.isl
        and wait["when"]["osl"] == load.osl
        and load.tp < wait["when"]["tp_below"]
    ):
        wait = None
    return dict(
        max_num_batched_tokens=_tokens(s["max_num_tokens"], load.concurrency, load.isl),
        memory_share=s["kv_memory_fraction"],
        max_num_seqs=_pick(s["max_batch_size"], load),
        cuda_graph_max_batch=_pick(s["cuda_graph_max_batch"], load),
        kv_cache_dtype=_kv_dtype(s["kv_cache_dtype"]),
        attention_dp_balance=balance is not None,
        attention_dp_timeout_iters=balance["timeout_iters"] if balance else None,
        attention_dp_batching_wait_iters=balance["batching_wait_iters"] if balance else None,
        batch_wait_timeout_iters=wait["timeout_iters"] if wait else 0,
        batch_wait_max_tokens_ratio=wait["max_tokens_ratio"] if wait else 0.0,
        stream_interval=s["stream_interval"],
        unpriced=(("moe_backend", s["moe_backend"]),) if s["moe_backend"] else (),
    )


def _recorded(s: dict, load: Load) -> dict:
    """The settings the script recorded as written (a whole dict where its branches differ)."""
    return _pick(s.get("recorded") or {}, load)


def _sglang(s: dict, load: Load) -> dict:
    recorded = _recorded(s, load)
    return dict(
        max_num_batched_tokens=_pick(s.get("chunked_prefill_size"), load),
        max_prefill_tokens=_pick(s.get("max_prefill_tokens"), load),
        max_num_seqs=_pick(s.get("max_running_requests"), load),
        cuda_graph_max_batch=_pick(s.get("cuda_graph_max_bs"), load),
        memory_share=_pick(s.get("mem_fraction_static"), load),
        stream_interval=recorded.get("stream_interval"),
        unpriced=tuple(sorted((k, v) for k, v in recorded.items() if k != "stream_interval")),
    )


def _vllm(s: dict, load: Load) -> dict:
    return dict(
        max_num_batched_tokens=_pick(s.get("max_num_batched_tokens"), load),
        max_num_seqs=_pick(s.get("max_num_seqs"), load),
        cuda_graph_max_batch=_pick(s.get("max_cudagraph_capture_size"), load),
        memory_share=_pick(s.get("gpu_memory_utilization"), load),
        kv_cache_dtype=_kv_dtype(_pick(s.get("kv_cache_dtype"), load)),
        unpriced=tuple(sorted(_recorded(s, load).items())),
    )


RESOLVE: dict[str, Callable[[dict, Load], dict]] = {"trtllm": _trtllm, "sglang": _sglang, "vllm": _vllm}


def run_settings(engine: str, model: str, system: str, date: str, load: Load) -> RunSettings | None:
    """The settings a row measured on `date` ran with, or None where no recipe covers it; ValueError where
    the recipe sets something servelab cannot represent."""
    r = find_recipe(engine, model, system, date)
    if r is None:
        return None
    in_use = [v for v in r["versions"] if v["date"] <= date][-1]  # the range starts at its first version
    return RunSettings(
        recipe=f"InferenceX {in_use['file']}@{in_use['commit'][:9]} ({r['from']}..{r['until'] or 'now'})",
        client_range_ratio=INFERENCEX_RANGE_RATIO,
        **RESOLVE[engine](r["settings"], load),
    )
