"""An aggregated replica's closed-loop rates four ways: the planner's short window (a lane's C, at least 24,
after C of warm-up), Little's law on that same run (C / mean E2EL, what the planner now reports), the window
of `servelab estimate --mode agg` (max(2C, 64) after C of warm-up), and a long window (30 x C after 3 x C of
warm-up); requests/s and output tokens/s. Writes nothing.

    PYTHONPATH=src python accuracy/agg_rate_window.py   # about 3 s of CPU

The figures of docs/accuracy.md, "The aggregated points' rate by Little's law too" (steady_rates).
"""

from decode_rate_window import DECODE, LONG, LONG_WARMUP, context

from servelab.predict.plan.split import pool_config
from servelab.predict.serving.aggregated import simulate, steady_rates
from servelab.specs import Parallel

# the top aggregated candidates of `servelab plan` (its default question) and of `servelab plan qwen3-32b
# --gpus 8 --isl 2048 --osl 256 --mode both`, at the replica's concurrency (as DECODE's fields)
PLAN = [
    (
        "sgl-project/DeepSeek-V4-Flash-FP8",
        "h200_sxm",
        "vllm",
        Parallel(tp=8, ep=8, dp_attn=True),
        8192,
        1024,
        (256,),
    ),
    ("sgl-project/DeepSeek-V4-Flash-FP8", "h200_sxm", "vllm", Parallel(tp=8, ep=8), 8192, 1024, (128,)),
    ("Qwen/Qwen3-32B", "h200_sxm", "vllm", Parallel(tp=2, pp=4), 2048, 256, (304,)),
]


def main() -> int:
    print(
        "requests/s and output tok/s: planner window | Little's law on it | estimate's window | 30 x C window"
    )
    for model, system, backend, parallel, isl, osl, loads in DECODE + PLAN:
        ctx = context(model, system, backend, parallel, isl, osl)
        cfg = pool_config(ctx, parallel, "aggregated")
        for clients in loads:
            planner = ctx.workload(clients, cfg.lanes)
            estimate = planner.model_copy(update={"num_requests": None})  # estimate's default sizing
            long = planner.model_copy(
                update={"num_requests": LONG * clients, "warmup": LONG_WARMUP * clients}
            )
            short, est, steady = (
                simulate(ctx.model, cfg.parallel, ctx.engine, cfg.mem, wl, cfg.pricer)
                for wl in (planner, estimate, long)
            )
            sims = (short, steady_rates(short, clients, osl), est, steady)
            name = f"{model.split('/')[1]} {backend} {parallel.label()} {system} {isl}/{osl} C {clients}"
            cells = " | ".join(f"{s.request_tps[0]:8.3f} {s.output_tps[0]:9.1f}" for s in sims)
            print(f"{name:52s} | {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
