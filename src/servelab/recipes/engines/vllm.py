"""vLLM adapter: a recipe arm as typed server settings, rendered by vLLM's grammar (`vllm serve MODEL`)."""

from __future__ import annotations

from servelab.engines.names import Engine
from servelab.engines.settings import ServerSettings
from servelab.engines.vllm.grammar import GRAMMAR
from servelab.errors import ServelabError
from servelab.recipes.engines.base import Launch, refuse
from servelab.recipes.engines.profiles import Extras, launch_of

# MoE backends that only run with expert parallelism: vLLM's MegaMoE refuses to start without it.
EP_ONLY_MOE_BACKENDS = {"deep_gemm_mega_moe"}
HOST = "0.0.0.0"


def settings(recipe, arm, max_model_len: int | None, port: int, extra: Extras) -> ServerSettings:
    """The server settings of one arm: the recipe's typed engine fields and the arm's layout."""
    refuse(Engine.VLLM, recipe, ["extra-options"])
    e = recipe.engine
    layout = GRAMMAR.layout(arm.tp_, arm.ep_, arm.pp_, arm.dp_attn_, arm.dcp_size or 1, arm.pcp_size or 1)
    if e.moe_backend in EP_ONLY_MOE_BACKENDS and arm.ep_ == 1:
        raise ServelabError(
            f"engine.moe-backend {e.moe_backend} needs expert parallelism (ep > 1) in every arm"
        )
    spec = None
    if arm.spec_ != "none":
        spec = e.speculative_config
        upstream = GRAMMAR.parse_args(extra.args, fields=("speculative_config",)).speculative_config
        # upstream's script may launch a spec-decoding arm without a draft at some concurrencies (Kimi-K3's
        # DSpark script from 24 up): its profile says so; without a profile the recipe must say how
        if not spec and upstream is None and extra == Extras():
            raise ServelabError(f"spec-decoding {arm.spec_} needs engine.speculative-config (method, tokens)")
    return ServerSettings(
        model=recipe.model,
        revision=recipe.revision,
        host=HOST,
        port=port,
        **layout,
        max_model_len=e.max_model_len or max_model_len,
        kv_cache_dtype=e.kv_cache_dtype,
        block_size=e.block_size,
        moe_backend=e.moe_backend,
        attention_config=e.attention_config or None,
        compilation_config=e.compilation_config or None,
        kernel_config=(e.kernel_config.dump() or None) if e.kernel_config else None,
        tokenizer_mode=e.tokenizer_mode,
        tool_call_parser=e.tool_call_parser,
        # vLLM needs auto tool choice for a tool-call parser to be used; on by default with a parser.
        auto_tool_choice=bool(
            e.enable_auto_tool_choice or (e.tool_call_parser and e.enable_auto_tool_choice is None)
        ),
        reasoning_parser=e.reasoning_parser,
        max_num_batched_tokens=e.max_num_batched_tokens,
        max_num_seqs=e.max_num_seqs,
        memory_fraction=e.gpu_memory_utilization,
        prefix_caching=e.enable_prefix_caching,
        trust_remote_code=bool(e.trust_remote_code),
        speculative_config=spec or None,
        extra_args=e.extra_args,
    )


def render(recipe, arm, max_model_len: int | None, port: int, extra: Extras | None = None) -> Launch:
    extra = extra or Extras()
    return launch_of(GRAMMAR, settings(recipe, arm, max_model_len, port, extra), recipe, port, extra)
