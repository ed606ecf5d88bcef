"""SGLang adapter: `python3 -m sglang.launch_server ...`."""

from __future__ import annotations

from servelab.errors import ServelabError
from servelab.recipes.engines.base import Launch, base_env, refuse
from servelab.recipes.engines.profiles import Extras, apply, flag_name

# SGLang names the FP8 KV cache by its exact format.
KV_DTYPES = {
    "fp8": "fp8_e4m3",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
    "auto": "auto",
    "bf16": "bf16",
}


def render(recipe, arm, max_model_len: int, port: int, extra: Extras | None = None) -> Launch:
    extra = extra or Extras()
    refuse("sglang", recipe, ["attention-config", "compilation-config", "kernel-config", "extra-options"])
    if (arm.dcp_size or 1) > 1 or (arm.pcp_size or 1) > 1:
        raise ServelabError("dcp-size/pcp-size: the SGLang adapter does not render context parallelism")
    e = recipe.engine
    tp, ep = arm.tp_, arm.ep_
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", recipe.model]
    if recipe.revision:
        argv += ["--revision", recipe.revision]
    argv += ["--host", "0.0.0.0", "--port", str(port), "--tp", str(tp)]
    if ep > 1:
        if ep != tp:
            raise ServelabError(
                f"ep={ep}: SGLang's expert parallel spans the {tp} TP ranks; set ep to {tp} or 1"
            )
        argv += ["--ep", str(ep)]
    if arm.dp_attn_:
        argv += ["--enable-dp-attention", "--dp", str(tp)]
    if arm.pp_ > 1:
        argv += ["--pp-size", str(arm.pp_)]
    argv += ["--context-length", str(e.max_model_len or max_model_len)]
    if e.kv_cache_dtype:
        if e.kv_cache_dtype not in KV_DTYPES:
            raise ServelabError(
                f"engine.kv-cache-dtype {e.kv_cache_dtype!r}: SGLang takes {', '.join(KV_DTYPES)}"
            )
        argv += ["--kv-cache-dtype", KV_DTYPES[e.kv_cache_dtype]]
    if e.block_size:
        argv += ["--page-size", str(e.block_size)]
    if e.moe_backend:
        argv += ["--moe-runner-backend", e.moe_backend]
    if e.tokenizer_mode:
        argv += ["--tokenizer-mode", e.tokenizer_mode]
    if e.tool_call_parser:
        argv += ["--tool-call-parser", e.tool_call_parser]
    if e.reasoning_parser:
        argv += ["--reasoning-parser", e.reasoning_parser]
    if e.max_num_batched_tokens:
        argv += ["--chunked-prefill-size", str(e.max_num_batched_tokens)]
    if e.max_num_seqs:
        argv += ["--max-running-requests", str(e.max_num_seqs)]
    if e.gpu_memory_utilization:
        argv += ["--mem-fraction-static", str(e.gpu_memory_utilization)]
    if e.enable_prefix_caching is False:
        argv.append("--disable-radix-cache")
    if e.trust_remote_code:
        argv.append("--trust-remote-code")
    if arm.spec_ != "none":
        # {"algorithm": "EAGLE", "num_steps": 3} -> --speculative-algorithm EAGLE --speculative-num-steps 3
        for k, v in (e.speculative_config or {}).items():
            argv += [f"--speculative-{k.replace('_', '-')}", str(v)]
        if not e.speculative_config and not any(
            flag_name(a) == "--speculative-algorithm" for a in extra.args
        ):
            raise ServelabError(
                f"spec-decoding {arm.spec_} needs engine.speculative-config (algorithm, num_steps, ...)"
            )
    argv += e.extra_args
    return Launch(argv=apply(argv, extra), env=base_env(recipe, extra.env), files=extra.files, port=port)
