"""A closed-loop simulation's request rate three ways: the short measuring window the planner simulates (a
lane's C, at least 24, after C of warm-up), Little's law on that same run (C / mean E2EL), and a long window
(30 x C after 3 x C of warm-up), for disaggregated decode workers (prompts' KV arrived), the same layouts
aggregated, and prefill workers saturated (one output token). Writes nothing.

    PYTHONPATH=src python accuracy/decode_rate_window.py   # about 3 s of CPU

The figures of docs/accuracy.md, "The decode worker's rate by Little's law"
(predict.serving.aggregated.steady_rates).
"""

from servelab.predict.engines import engine_profile
from servelab.predict.plan.disagg import PrefillPool, decode_worker
from servelab.predict.plan.split import Split, pool_config, split_context
from servelab.predict.serving.aggregated import simulate, steady_rates
from servelab.specs import Parallel, load_model, load_system

LONG, LONG_WARMUP = 30, 3  # the long window: measured and warm-up requests per client
DECODE = [  # model, system, engine, layout, ISL, OSL, clients
    ("Qwen/Qwen3-32B", "h200_sxm", "vllm", Parallel(tp=2), 2048, 256, (16, 64)),
    ("Qwen/Qwen3-32B", "h200_sxm", "sglang", Parallel(tp=2), 2048, 256, (16, 64)),
    ("deepseek-ai/DeepSeek-R1", "h200_sxm", "trtllm", Parallel(tp=8, ep=8), 1024, 1024, (4, 64, 256)),
]
PREFILL = [  # model, system, engine, layout, ISL
    ("deepseek-ai/DeepSeek-R1", "b200_sxm", "sglang", Parallel(tp=8, dp_attn=True), 8192),
    ("deepseek-ai/DeepSeek-R1", "gb200", "sglang", Parallel(tp=8, ep=8, dp_attn=True), 8192),
    ("deepseek-ai/DeepSeek-R1", "gb200", "sglang", Parallel(tp=8, dp_attn=True), 1024),
    ("deepseek-ai/DeepSeek-R1", "h200_sxm", "trtllm", Parallel(tp=8, ep=8, dp_attn=True), 8192),
    ("Qwen/Qwen3-32B", "h200_sxm", "vllm", Parallel(tp=2), 2048),
]


def context(model: str, system: str, backend: str, parallel: Parallel, isl: int, osl: int):
    spec = load_system(system)
    engine = engine_profile(backend, spec.hbm_gib)
    split = Split(parallel, 1, parallel, 1)
    return split_context(engine.model_as_served(load_model(model)), spec, engine, split, isl, osl)


def three_ways(ctx, cfg, clients: int, prefilled: bool, osl: int | None = None) -> str:
    """The short window, Little's law on it, the long window, and short / long."""
    short_wl = ctx.workload(clients, cfg.lanes, osl=osl)
    long_wl = short_wl.model_copy(update={"num_requests": LONG * clients, "warmup": LONG_WARMUP * clients})
    short, long = (
        simulate(ctx.model, cfg.parallel, ctx.engine, cfg.mem, wl, cfg.pricer, prefilled=prefilled)
        for wl in (short_wl, long_wl)
    )
    little = steady_rates(short, clients, short_wl.osl).request_tps[0]
    rates = (short.request_tps[0], little, long.request_tps[0])
    return " | ".join(f"{r:9.3f}" for r in rates) + f" | {rates[0] / rates[2]:5.2f}"


def main() -> int:
    print("requests/s: short window | Little's law on it | 30 x C window | short / long")
    for model, system, backend, parallel, isl, osl, loads in DECODE:
        ctx = context(model, system, backend, parallel, isl, osl)
        cfg = decode_worker(ctx, pool_config(ctx, parallel, "decode"))
        for clients in loads:
            for prefilled, role in ((True, "decode worker"), (False, "aggregated")):
                name = f"{model.split('/')[1]} {backend} {parallel.label()} {system} {isl}/{osl} C {clients}"
                print(f"{role:13s} {name:52s} | {three_ways(ctx, cfg, clients, prefilled)}")
    for model, system, backend, parallel, isl in PREFILL:
        ctx = context(model, system, backend, parallel, isl, 1)
        cfg = pool_config(ctx, parallel, "prefill")
        clients = (
            PrefillPool(ctx, cfg).saturated.lane_workload.clients * cfg.lanes
        )  # as the planner saturates
        name = f"{model.split('/')[1]} {backend} {parallel.label()} {system} {isl} C {clients}"
        print(f"{'prefill':13s} {name:52s} | {three_ways(ctx, cfg, clients, False, osl=1)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
