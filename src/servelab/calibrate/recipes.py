"""The engine settings a calibration row was measured with, from the recipe that ran it.

InferenceX measured many rows of silicon_sample.csv (TensorRT-LLM's, SGLang's DeepSeek-R1, vLLM's gpt-oss-120b
and Llama-3.1-70B on H200), each with the recipe script of that date. data/inferencex_recipes.json (made by
scripts/inferencex_recipes.py from InferenceX's git history; its `_provenance` names the commit) lists, per
engine, model and system, the settings each version of the script set, in the engine's own words, and the
dates it was in use (read through its model, calibrate/recipe_table.py). A row with a measured date inside a
range is replayed with that range's settings, resolved for its load and split into what the simulator prices;
a row without one keeps the engine's defaults. Settings whose effect is not modelled are carried in
`unpriced`.
"""

from dataclasses import dataclass

from servelab.calibrate.recipe_table import Load, RecipeRange, recipe_table
from servelab.engines import Engine
from servelab.specs import Dtype

__all__ = ["INFERENCEX_RANGE_RATIO", "Load", "RunSettings", "find_recipe", "run_settings"]

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
    # TensorRT-LLM enable_chunked_prefill, vLLM's own name (None: the engine's default): without it a prompt
    # joins a step only whole, within the token budget
    chunked_prefill: bool | None = None
    cuda_graph_max_batch: int | None = None
    # TensorRT-LLM free_gpu_memory_fraction (of the memory left free), vLLM gpu_memory_utilization, SGLang
    # mem_fraction_static (each priced by its engine's KV rule, predict.memory.memory_per_gpu)
    memory_share: float | None = None
    kv_cache_dtype: Dtype | None = None
    state_dtype: Dtype | None = None  # a linear-attention state's format (SGLang --mamba-ssm-dtype)
    attention_dp_balance: bool = False
    attention_dp_timeout_iters: int | None = None
    attention_dp_batching_wait_iters: int | None = None
    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    # tokens a running request's streamed chunk waits for: it divides the chunks an API server sends
    # (EngineProfile.stream_interval; priced where the engine's profile has a chunk cost, vLLM's)
    stream_interval: int | None = None
    unpriced: tuple[tuple[str, object], ...] = ()  # other settings recorded as the recipe wrote them
    # the client's lengths: uniform in [L x r, L] (InferenceX's rule; None: the replay's own spread)
    client_range_ratio: float | None = None
    mixed_chunk: bool | None = None  # SGLang --enable-mixed-chunk (prompt chunks ride with the decodes)
    # vLLM --enable-expert-parallel set for every job, whatever ep the row records (calibrate/rows.py
    # with_recipe reads the row's MoE layers as expert parallel over all its GPUs)
    expert_parallel: bool | None = None
    # the measured run's requests per client (N / C), replayed from an idle engine (None: the replay's own,
    # calibrate/price.py PROMPTS_PER_CONCURRENCY)
    requests_per_client: int | None = None

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
            "chunked_prefill": self.chunked_prefill,
            "cuda_graph_max_batch": self.cuda_graph_max_batch,
            "attention_dp_balance": self.attention_dp_balance or None,
            "attention_dp_timeout_iters": self.attention_dp_timeout_iters,
            "attention_dp_batching_wait_iters": self.attention_dp_batching_wait_iters,
            "batch_wait_timeout_iters": self.batch_wait_timeout_iters or None,
            "batch_wait_max_tokens_ratio": self.batch_wait_max_tokens_ratio or None,
            "mixed_chunk": self.mixed_chunk,
            "stream_interval": self.stream_interval,
        }
        return {k: v for k, v in fields.items() if v is not None}


def find_recipe(
    engine: Engine, model: str, system: str, date: str, precision: str | None = None
) -> RecipeRange | None:
    """The recipe range in use on `date` (YYYY-MM-DD) for this engine, model name and system, or None; a
    range written for one precision (the rows' precision column) serves only rows of that precision."""
    for r in recipe_table().recipes:
        if r.engine != engine or model not in r.models or r.system != system:
            continue
        if r.precision is not None and r.precision != precision:
            continue
        if r.start <= date and (r.until is None or date < r.until):
            return r
    return None


def run_settings(
    engine: Engine, model: str, system: str, date: str, load: Load, precision: str | None = None
) -> RunSettings | None:
    """The settings a row of `precision` measured on `date` ran with, or None where no recipe covers it;
    ValueError where the recipe sets something servelab cannot represent."""
    r = find_recipe(engine, model, system, date, precision)
    if r is None:
        return None
    used = r.in_use(date)
    return RunSettings(
        recipe=f"InferenceX {used.file}@{used.commit[:9]} ({r.start}..{r.until or 'now'})",
        client_range_ratio=INFERENCEX_RANGE_RATIO,
        **r.settings.resolve(load),
    )
