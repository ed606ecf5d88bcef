"""The engine settings a calibration row was measured with, from the recipe that ran it.

InferenceX measured most TensorRT-LLM rows of silicon_sample.csv, each with the recipe script of that date.
data/inferencex_recipes.json (made by scripts/inferencex_recipes.py from InferenceX's git history; its
`_provenance` names the commit) lists, per engine, model and system, the settings each version of the script
set and the dates it was in use. A row with a measured date inside a range is replayed with that range's
settings; a row without one keeps the engine's defaults.
"""

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources


@dataclass(frozen=True)
class RunSettings:
    """What the recipe set for one row, resolved for its load and split (None: the engine's default)."""

    recipe: str  # the script and commits it was read from
    max_num_tokens: int | None = None
    kv_memory_fraction: float | None = None  # TensorRT-LLM free_gpu_memory_fraction
    max_batch_size: int | None = None
    cuda_graph_max_batch: int | None = None
    attention_dp_balance: bool = False
    attention_dp_timeout_iters: int | None = None
    attention_dp_batching_wait_iters: int | None = None
    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    stream_interval: int | None = None  # recorded, not priced: its effect on the first token is unverified

    def engine_overrides(self) -> dict:
        """EngineProfile fields these settings replace."""
        fields = {
            "max_num_batched_tokens": self.max_num_tokens,
            "max_num_seqs": self.max_batch_size,
            "cuda_graph_max_batch": self.cuda_graph_max_batch,
            "attention_dp_balance": self.attention_dp_balance or None,
            "attention_dp_timeout_iters": self.attention_dp_timeout_iters,
            "attention_dp_batching_wait_iters": self.attention_dp_batching_wait_iters,
            "batch_wait_timeout_iters": self.batch_wait_timeout_iters or None,
            "batch_wait_max_tokens_ratio": self.batch_wait_max_tokens_ratio or None,
        }
        return {k: v for k, v in fields.items() if v is not None}


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


def _count(value: int | str | None, concurrency: int) -> int | None:
    return concurrency if value == "conc" else value  # type: ignore[return-value]  # int or None here


def _tokens(rule: dict | None, concurrency: int, isl: int) -> int | None:
    """max_num_tokens from the recipe's rule (a job-level variable the rows do not record: None)."""
    if not rule or "variable" in rule:
        return None
    if "fixed" in rule:
        return int(rule["fixed"])
    step = rule["round_up_to"]
    tokens = -(-(concurrency + isl + rule["conc_plus_isl_plus"]) // step) * step
    return max(tokens, rule["at_least"] or 0)


def run_settings(
    engine: str,
    model: str,
    system: str,
    date: str,
    *,
    tp: int,
    dp_attn: bool,
    concurrency: int,
    isl: int,
    osl: int,
) -> RunSettings | None:
    """The settings a row measured on `date` ran with, or None where no recipe covers it."""
    r = find_recipe(engine, model, system, date)
    if r is None:
        return None
    s = r["settings"]
    balance = s["attention_dp_balance"] if dp_attn else None
    wait = s["batch_wait"]
    if wait and not (
        wait["when"]["isl"] == isl and wait["when"]["osl"] == osl and tp < wait["when"]["tp_below"]
    ):
        wait = None
    return RunSettings(
        recipe=f"InferenceX {r['files'][-1]} {r['from']}..{r['until'] or 'now'} ({r['commits'][-1][:9]})",
        max_num_tokens=_tokens(s["max_num_tokens"], concurrency, isl),
        kv_memory_fraction=s["kv_memory_fraction"],
        max_batch_size=_count(s["max_batch_size"], concurrency),
        cuda_graph_max_batch=_count(s["cuda_graph_max_batch"], concurrency),
        attention_dp_balance=balance is not None,
        attention_dp_timeout_iters=balance["timeout_iters"] if balance else None,
        attention_dp_batching_wait_iters=balance["batching_wait_iters"] if balance else None,
        batch_wait_timeout_iters=wait["timeout_iters"] if wait else 0,
        batch_wait_max_tokens_ratio=wait["max_tokens_ratio"] if wait else 0.0,
        stream_interval=s["stream_interval"],
    )
