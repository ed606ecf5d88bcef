"""TensorRT-LLM adapter: a recipe arm as typed server settings, rendered by TensorRT-LLM's grammar
(`trtllm-serve MODEL ... --extra_llm_api_options FILE`), and that options file."""

from __future__ import annotations

from servelab.engines.grammar import merge_options
from servelab.engines.names import Engine
from servelab.engines.settings import ServerSettings
from servelab.engines.trtllm.grammar import GRAMMAR, OPTIONS_FILE
from servelab.errors import ServelabError
from servelab.recipes.engines.base import Launch, base_env, refuse
from servelab.recipes.engines.profiles import Extras, apply
from servelab.recipes.yamlio import dump_yaml

HOST = "0.0.0.0"
RUNTIME = "pytorch"

__all__ = ["OPTIONS_FILE", "render", "settings"]


def settings(recipe, arm, max_model_len: int | None, port: int, extra: Extras) -> ServerSettings:
    """The server settings of one arm, with upstream's options file (the profile's), the typed fields and the
    recipe's extra-options merged in that order of precedence."""
    refuse(
        Engine.TRTLLM,
        recipe,
        ["attention-config", "compilation-config", "kernel-config", "tool-call-parser", "tokenizer-mode"],
    )
    if recipe.revision:
        raise ServelabError(
            "revision: trtllm-serve has no revision flag; point model at a pinned local snapshot"
        )
    layout = GRAMMAR.layout(arm.tp_, arm.ep_, arm.pp_, arm.dp_attn_, arm.dcp_size or 1, arm.pcp_size or 1)
    e = recipe.engine
    spec = None
    if arm.spec_ != "none":
        spec = e.speculative_config
        if not spec and "speculative_config" not in extra.options:
            raise ServelabError(
                f"spec-decoding {arm.spec_} needs engine.speculative-config (decoding_type, ...)"
            )
    typed = ServerSettings(
        model=recipe.model,
        host=HOST,
        port=port,
        backend=RUNTIME,
        **layout,
        max_model_len=e.max_model_len or max_model_len,
        max_num_seqs=e.max_num_seqs,
        max_num_batched_tokens=e.max_num_batched_tokens,
        memory_fraction=e.gpu_memory_utilization,
        reasoning_parser=e.reasoning_parser,
        trust_remote_code=bool(e.trust_remote_code),
        kv_cache_dtype=e.kv_cache_dtype,
        block_size=e.block_size,
        prefix_caching=e.enable_prefix_caching,
        moe_backend=e.moe_backend,
        speculative_config=spec or None,
        extra_args=e.extra_args,
    )
    # Upstream's options under the recipe's: typed fields and extra-options win.
    options = merge_options(merge_options(extra.options, GRAMMAR.options_of(typed)), e.extra_options or {})
    return GRAMMAR.with_options(typed, options)


def render(recipe, arm, max_model_len: int | None, port: int, extra: Extras | None = None) -> Launch:
    extra = extra or Extras()
    command = GRAMMAR.render(settings(recipe, arm, max_model_len, port, extra))
    files = {**extra.files, OPTIONS_FILE: dump_yaml(command.options or {})}
    return Launch(
        argv=apply(GRAMMAR, command.argv, extra), env=base_env(recipe, extra.env), files=files, port=port
    )
