"""`servelab memory`: memory per GPU of a deployment and how much KV cache it holds.

Library code and rich are imported inside the commands (start-up time): cli/main.py imports every command
module whatever the command.
"""

import typer

from servelab.cli._common import (
    Col,
    DpAttnOpt,
    EpOpt,
    JsonOpt,
    KvDtypeOpt,
    ModelArg,
    PpOpt,
    SystemOpt,
    TpOpt,
    WeightDtypeOpt,
    console,
    load_deployment,
    print_json,
    print_table,
)
from servelab.engines import Engine


def memory(
    model: str = ModelArg,
    system: str = SystemOpt,
    tp: int = TpOpt,
    ep: int = EpOpt,
    dp_attn: bool = DpAttnOpt,
    pp: int = PpOpt,
    weight_dtype: str = WeightDtypeOpt,
    kv_dtype: str = KvDtypeOpt,
    context: int = typer.Option(
        None, "--context", help="Context length for max sequences (default isl+osl 9216)"
    ),
    max_num_batched_tokens: int = typer.Option(
        8192, "--max-num-batched-tokens", help="Token budget per step (sizes the activation workspace)."
    ),
    gpu_memory_utilization: float | None = typer.Option(
        None,
        "--gpu-memory-utilization",
        help="vllm: the share of the whole GPU (as CUDA reports it) the engine fills (default 0.92, vLLM "
        "0.25's); sglang: mem-fraction-static, the share for weights and KV cache (default: SGLang's own for "
        "the GPU, split and chunked-prefill size); trtllm: the share of the memory left after weights and "
        "activations that goes to the KV "
        "cache (free_gpu_memory_fraction, default 0.9)",
    ),
    backend: str = typer.Option(
        Engine.VLLM.value, "--backend", help="vllm | sglang | trtllm: whose KV-cache rule"
    ),
    max_num_seqs: int | None = typer.Option(
        None,
        "--max-num-seqs",
        help="vllm: the server's sequence cap, which sizes its profile run and CUDA graphs (default: vLLM's "
        "for the GPU)",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Memory per GPU (weights, activations, reserve, KV cache), max KV tokens and max concurrent
    sequences."""
    from servelab.predict.engines import engine_profile  # noqa: PLC0415  # start-up time
    from servelab.predict.memory import check_fits, memory_per_gpu  # noqa: PLC0415  # start-up time
    from servelab.specs import check_precision  # noqa: PLC0415  # start-up time

    spec, sys_spec, parallel = load_deployment(
        model, system, weight_dtype, kv_dtype, tp, ep, dp_attn, pp, engine=backend
    )
    parallel.validate(spec)
    check_precision(spec, sys_spec)
    profile = engine_profile(backend)
    spec = profile.model_as_served(spec)
    rule = profile.kv_rule
    if "max_num_seqs" in rule:  # vLLM's rule: the cap given, or vLLM's default for the GPU
        rule["max_num_seqs"] = max_num_seqs
    mem = memory_per_gpu(spec, sys_spec, parallel, max_num_batched_tokens, gpu_memory_utilization, **rule)
    ctx = 9216 if context is None else context
    result = {
        "model": spec.name,
        "system": sys_spec.name,
        "parallel": parallel.label(),
        "backend": backend,
        "gpus": parallel.gpus,
        "weights_gib": mem.weights_gib,
        "activations_gib": mem.activations_gib,
        "reserve_gib": mem.reserve_gib,
        "kv_cache_gib": mem.kv_gib,
        "usable_gib": mem.total_gib,
        "hbm_gib": mem.hbm_gib,
        "fits": mem.fits,
        "kv_bytes_per_token_per_gpu": mem.kv_bytes_per_token,
        "max_kv_tokens_per_rank": mem.max_kv_tokens,
        "context": ctx,
        "max_sequences": mem.max_sequences(ctx, spec, parallel),  # 0 when nothing fits
        "source": mem.source,
    }
    if as_json:
        print_json("servelab.memory", result)
    else:
        rows = [
            (key.removesuffix("_gib"), f"{result[key]:,.2f}")
            for key in ("weights_gib", "activations_gib", "reserve_gib", "kv_cache_gib", "usable_gib")
        ]
        rows.append(("max KV tokens per rank", f"{mem.max_kv_tokens:,}"))
        rows.append((f"max sequences at {ctx} tokens", f"{result['max_sequences']:,}"))
        print_table(
            (Col("item", key=True), Col("value", "right", key=True)),
            rows,
            f"{spec.name} on {parallel.gpus}x {sys_spec.name} ({parallel.label()}), GiB per GPU",
        )
        console().print(f"[dim]source: {mem.source}[/dim]")
    if not mem.fits:
        check_fits(
            spec,
            sys_spec,
            parallel,
            max_num_batched_tokens=max_num_batched_tokens,
            gpu_memory_utilization=gpu_memory_utilization,
            **rule,
        )
