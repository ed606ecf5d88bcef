"""TensorRT-LLM adapter: `trtllm-serve MODEL ... --extra_llm_api_options FILE`, and that options file."""

from __future__ import annotations

from servelab.errors import ServelabError
from servelab.recipes.engines.base import Launch, base_env, refuse
from servelab.recipes.engines.profiles import Extras, apply, merge_options
from servelab.recipes.yamlio import dump_yaml

OPTIONS_FILE = "extra-llm-api-config.yml"


def render(recipe, arm, max_model_len: int, port: int, extra: Extras | None = None) -> Launch:
    extra = extra or Extras()
    refuse(
        "trtllm",
        recipe,
        ["attention-config", "compilation-config", "kernel-config", "tool-call-parser", "tokenizer-mode"],
    )
    if recipe.revision:
        raise ServelabError(
            "revision: trtllm-serve has no revision flag; point model at a pinned local snapshot"
        )
    if (arm.dcp_size or 1) > 1 or (arm.pcp_size or 1) > 1:
        raise ServelabError("dcp-size/pcp-size: the TensorRT-LLM adapter does not render context parallelism")
    e = recipe.engine
    argv = [
        "trtllm-serve",
        recipe.model,
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
        "--backend",
        "pytorch",
        "--tp_size",
        str(arm.tp_),
        "--ep_size",
        str(arm.ep_),
        "--pp_size",
        str(arm.pp_),
        "--max_seq_len",
        str(e.max_model_len or max_model_len),
    ]
    if e.max_num_seqs:
        argv += ["--max_batch_size", str(e.max_num_seqs)]
    if e.max_num_batched_tokens:
        argv += ["--max_num_tokens", str(e.max_num_batched_tokens)]
    if e.gpu_memory_utilization:
        argv += ["--kv_cache_free_gpu_memory_fraction", str(e.gpu_memory_utilization)]
    if e.reasoning_parser:
        argv += ["--reasoning_parser", e.reasoning_parser]
    if e.trust_remote_code:
        argv.append("--trust_remote_code")

    # TensorRT-LLM attention DP is off by default; say it only when on, as upstream's scripts mostly do.
    options: dict = {"enable_attention_dp": True} if arm.dp_attn_ else {}
    kv: dict = {}
    if e.kv_cache_dtype:
        kv["dtype"] = e.kv_cache_dtype
    if e.block_size:
        kv["tokens_per_block"] = e.block_size
    if e.enable_prefix_caching is not None:
        kv["enable_block_reuse"] = e.enable_prefix_caching
    if kv:
        options["kv_cache_config"] = kv
    if e.moe_backend:
        options["moe_config"] = {"backend": e.moe_backend}
    if arm.spec_ != "none":
        if e.speculative_config:
            options["speculative_config"] = e.speculative_config
        elif "speculative_config" not in extra.options:
            raise ServelabError(
                f"spec-decoding {arm.spec_} needs engine.speculative-config (decoding_type, ...)"
            )
    # Upstream's options under the recipe's: typed fields and extra-options win.
    options = merge_options(merge_options(extra.options, options), e.extra_options or {})
    argv += ["--extra_llm_api_options", OPTIONS_FILE]
    argv += e.extra_args
    files = {**extra.files, OPTIONS_FILE: dump_yaml(options)}
    return Launch(argv=apply(argv, extra), env=base_env(recipe, extra.env), files=files, port=port)
