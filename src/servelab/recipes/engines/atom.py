"""ATOM adapter: a recipe arm as typed server settings, rendered by ATOM's grammar
(`python3 -m atom.entrypoints.openai_server --model M ...`)."""

from __future__ import annotations

from servelab.engines.atom.grammar import GRAMMAR, KV_CACHE_DTYPES
from servelab.engines.names import Engine
from servelab.engines.settings import ServerSettings
from servelab.errors import ServelabError
from servelab.recipes.engines.base import Launch, refuse
from servelab.recipes.engines.profiles import Extras, launch_of

HOST = "0.0.0.0"
# the flag that turns ATOM's speculative decoding on (with --num-speculative-tokens and --draft-model)
SPEC_METHOD = "--method"


def settings(recipe, arm, max_model_len: int | None, port: int, extra: Extras) -> ServerSettings:
    """The server settings of one arm: the recipe's typed engine fields and the arm's layout. ATOM has no
    revision, tokenizer-mode, parser or attention / compilation / kernel config flags: those are refused."""
    refuse(
        Engine.ATOM,
        recipe,
        [
            "attention-config",
            "compilation-config",
            "kernel-config",
            "extra-options",
            "speculative-config",
            "tokenizer-mode",
            "tool-call-parser",
            "reasoning-parser",
        ],
    )
    if recipe.revision:
        raise ServelabError(
            "ATOM has no --revision flag: pin the checkpoint by a local path", field="revision"
        )
    layout = GRAMMAR.layout(arm.tp_, arm.ep_, arm.pp_, arm.dp_attn_, arm.dcp_size or 1, arm.pcp_size or 1)
    e = recipe.engine
    kv = None
    if e.kv_cache_dtype:
        if e.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ServelabError(
                f"engine.kv-cache-dtype {e.kv_cache_dtype!r}: ATOM takes {', '.join(KV_CACHE_DTYPES)}"
            )
        kv = KV_CACHE_DTYPES[e.kv_cache_dtype]
    if arm.spec_ != "none" and SPEC_METHOD not in {GRAMMAR.canonical(t) for t in extra.args}:
        raise ServelabError(
            f"spec-decoding {arm.spec_}: ATOM's speculative flags (--method, --num-speculative-tokens) come "
            "from InferenceX's launch script; no profile gives them for this recipe"
        )
    return ServerSettings(
        model=recipe.model,
        host=HOST,
        port=port,
        **layout,
        max_model_len=e.max_model_len or max_model_len,
        kv_cache_dtype=kv,
        block_size=e.block_size,
        moe_backend=e.moe_backend,
        max_num_batched_tokens=e.max_num_batched_tokens,
        max_num_seqs=e.max_num_seqs,
        memory_fraction=e.gpu_memory_utilization,
        prefix_caching=e.enable_prefix_caching,
        trust_remote_code=bool(e.trust_remote_code),
        extra_args=e.extra_args,
    )


def render(recipe, arm, max_model_len: int | None, port: int, extra: Extras | None = None) -> Launch:
    extra = extra or Extras()
    return launch_of(GRAMMAR, settings(recipe, arm, max_model_len, port, extra), recipe, port, extra)
