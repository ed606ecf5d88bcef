"""SGLang adapter: a recipe arm as typed server settings, rendered by SGLang's grammar
(`python3 -m sglang.launch_server ...`)."""

from __future__ import annotations

from servelab.engines.names import Engine
from servelab.engines.settings import ServerSettings
from servelab.engines.sglang.grammar import GRAMMAR, KV_CACHE_DTYPES
from servelab.errors import ServelabError
from servelab.recipes.engines.base import Launch, refuse
from servelab.recipes.engines.profiles import Extras, launch_of

HOST = "0.0.0.0"


def settings(recipe, arm, max_model_len: int | None, port: int, extra: Extras) -> ServerSettings:
    """The server settings of one arm: the recipe's typed engine fields and the arm's layout."""
    refuse(
        Engine.SGLANG, recipe, ["attention-config", "compilation-config", "kernel-config", "extra-options"]
    )
    layout = GRAMMAR.layout(arm.tp_, arm.ep_, arm.pp_, arm.dp_attn_, arm.dcp_size or 1, arm.pcp_size or 1)
    e = recipe.engine
    kv = None
    if e.kv_cache_dtype:
        if e.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ServelabError(
                f"engine.kv-cache-dtype {e.kv_cache_dtype!r}: SGLang takes {', '.join(KV_CACHE_DTYPES)}"
            )
        kv = KV_CACHE_DTYPES[e.kv_cache_dtype]
    spec = None
    if arm.spec_ != "none":
        # {"algorithm": "EAGLE", "num_steps": 3} -> --speculative-algorithm EAGLE --speculative-num-steps 3
        spec = e.speculative_config
        upstream = GRAMMAR.parse_args(extra.args, fields=("speculative_config",)).speculative_config
        if not spec and not (upstream or {}).get("algorithm"):
            raise ServelabError(
                f"spec-decoding {arm.spec_} needs engine.speculative-config (algorithm, num_steps, ...)"
            )
    return ServerSettings(
        model=recipe.model,
        revision=recipe.revision,
        host=HOST,
        port=port,
        **layout,
        max_model_len=e.max_model_len or max_model_len,
        kv_cache_dtype=kv,
        block_size=e.block_size,
        moe_backend=e.moe_backend,
        tokenizer_mode=e.tokenizer_mode,
        tool_call_parser=e.tool_call_parser,
        reasoning_parser=e.reasoning_parser,
        max_num_batched_tokens=e.max_num_batched_tokens,
        max_num_seqs=e.max_num_seqs,
        memory_fraction=e.gpu_memory_utilization,
        # The radix cache is on unless turned off; SGLang has no flag that says on.
        prefix_caching=False if e.enable_prefix_caching is False else None,
        trust_remote_code=bool(e.trust_remote_code),
        speculative_config=spec or None,
        extra_args=e.extra_args,
    )


def render(recipe, arm, max_model_len: int | None, port: int, extra: Extras | None = None) -> Launch:
    extra = extra or Extras()
    return launch_of(GRAMMAR, settings(recipe, arm, max_model_len, port, extra), recipe, port, extra)
