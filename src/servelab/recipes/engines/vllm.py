"""vLLM adapter: `vllm serve MODEL ...` from the typed recipe and one search-space arm."""

from __future__ import annotations

from servelab.errors import ServelabError
from servelab.recipes.engines.base import Launch, base_env, json_arg, refuse
from servelab.recipes.engines.profiles import Extras, apply, flag_name

# MoE backends that only run with expert parallelism: vLLM's MegaMoE refuses to start without it.
EP_ONLY_MOE_BACKENDS = {"deep_gemm_mega_moe"}


def parallel_args(arm) -> list[str]:
    tp, ep, pp = arm.tp_, arm.ep_, arm.pp_
    if arm.dp_attn_:
        # Attention data parallel: tp GPUs become tp replicas of one TP rank each (vLLM's DP + EP layout).
        args = ["--tensor-parallel-size", "1", "--data-parallel-size", str(tp)]
    else:
        args = ["--tensor-parallel-size", str(tp)]
    if pp > 1:
        args += ["--pipeline-parallel-size", str(pp)]
    if ep > 1:
        # vLLM's expert-parallel size is always TP x DP of a stage; other sizes cannot be expressed.
        if ep != tp:
            raise ServelabError(
                f"ep={ep}: vLLM's expert parallel spans all {tp} GPUs of a stage; set ep to {tp} or 1"
            )
        args.append("--enable-expert-parallel")
    if arm.dcp_size and arm.dcp_size > 1:
        args += ["--decode-context-parallel-size", str(arm.dcp_size)]
    if arm.pcp_size and arm.pcp_size > 1:
        args += ["--prefill-context-parallel-size", str(arm.pcp_size)]
    return args


def render(recipe, arm, max_model_len: int, port: int, extra: Extras | None = None) -> Launch:
    extra = extra or Extras()
    refuse("vllm", recipe, ["extra-options"])
    e = recipe.engine
    argv = ["vllm", "serve", recipe.model]
    if recipe.revision:
        argv += ["--revision", recipe.revision]
    argv += ["--host", "0.0.0.0", "--port", str(port)]
    argv += parallel_args(arm)
    argv += ["--max-model-len", str(e.max_model_len or max_model_len)]
    if e.kv_cache_dtype:
        argv += ["--kv-cache-dtype", e.kv_cache_dtype]
    if e.block_size:
        argv += ["--block-size", str(e.block_size)]
    if e.moe_backend:
        if e.moe_backend in EP_ONLY_MOE_BACKENDS and arm.ep_ == 1:
            raise ServelabError(
                f"engine.moe-backend {e.moe_backend} needs expert parallelism (ep > 1) in every arm"
            )
        argv += ["--moe-backend", e.moe_backend]
    for k, v in (e.attention_config or {}).items():
        argv.append(f"--attention_config.{k}={v}")
    if e.compilation_config:
        argv += ["--compilation-config", json_arg(e.compilation_config)]
    if e.kernel_config and e.kernel_config.dump():
        argv += ["--kernel-config", json_arg(e.kernel_config.dump())]
    if e.tokenizer_mode:
        argv += ["--tokenizer-mode", e.tokenizer_mode]
    if e.tool_call_parser:
        argv += ["--tool-call-parser", e.tool_call_parser]
    # vLLM needs auto tool choice for a tool-call parser to be used; on by default with a parser.
    if e.enable_auto_tool_choice or (e.tool_call_parser and e.enable_auto_tool_choice is None):
        argv.append("--enable-auto-tool-choice")
    if e.reasoning_parser:
        argv += ["--reasoning-parser", e.reasoning_parser]
    if e.max_num_batched_tokens:
        argv += ["--max-num-batched-tokens", str(e.max_num_batched_tokens)]
    if e.max_num_seqs:
        argv += ["--max-num-seqs", str(e.max_num_seqs)]
    if e.gpu_memory_utilization:
        argv += ["--gpu-memory-utilization", str(e.gpu_memory_utilization)]
    if e.enable_prefix_caching is not None:
        argv.append("--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching")
    if e.trust_remote_code:
        argv.append("--trust-remote-code")
    if arm.spec_ != "none":
        if e.speculative_config:
            argv += ["--speculative-config", json_arg(e.speculative_config)]
        elif not any(flag_name(a) == "--speculative-config" for a in extra.args):
            raise ServelabError(f"spec-decoding {arm.spec_} needs engine.speculative-config (method, tokens)")
    argv += e.extra_args
    return Launch(argv=apply(argv, extra), env=base_env(recipe, extra.env), files=extra.files, port=port)
