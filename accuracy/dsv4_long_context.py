"""DeepSeek-V4 at long context on 8 GPUs, TP8 against DP8, as `servelab bench --simulate` runs it
(vLLM engine, shipped calibration, every client at t=0, one prompt per client, range ratio 0), next to the
one public measurement (V4-Flash on 8x B200, vLLM v0.25): median TTFT, makespan, median TPOT per arm, and
the two-term reading of each (I = the work every TP rank repeats, X = the work TP splits; TP8 one prompt =
I + X / 8, DP8 with eight = I + X).

    python accuracy/dsv4_long_context.py [--system h200_sxm] [--system b200_sxm] [--model CHECKPOINT]
    python accuracy/dsv4_long_context.py --model nvidia/DeepSeek-V4-Pro-NVFP4 --system b200_sxm
"""

import argparse
import random
from collections import Counter

from servelab.predict.twin import BenchStream, EngineSettings, simulate_benchmark
from servelab.specs import Parallel, load_model, load_system

FLASH = "sgl-project/DeepSeek-V4-Flash-FP8"
ARMS = {"TP8": Parallel(tp=8, ep=8), "DP8": Parallel(tp=8, ep=8, dp_attn=True)}
# (input tokens, clients, output tokens): one output token count per row as docs/accuracy.md shows them
POINTS = [
    (131_072, 1, 1024),
    (131_072, 8, 1024),
    (1_000_000, 1, 64),
    (1_000_000, 2, 64),
    (1_000_000, 4, 64),
    (1_000_000, 8, 1024),
]
# Reported with recipe dsv4f-fp8-b200-vllm (8x B200, FP4 indexer cache, MegaMoE), 1M inputs, 8 clients
PUBLIC_B200 = {"TP8": (314.0, 502.0), "DP8": (91.0, 157.0)}  # median TTFT s, makespan s


def run(
    model: str, system_name: str, parallel: Parallel, isl: int, clients: int, osl: int
) -> tuple[float, float, float]:
    stream = BenchStream(
        random_input_len=isl,
        random_output_len=osl,
        random_range_ratio=0.0,
        random_prefix_len=0,
        num_prompts=clients,
        max_concurrency=clients,
        request_rate=float("inf"),
    )
    twin = simulate_benchmark(
        load_model(model),
        load_system(system_name),
        parallel,
        # every prompt prefilled whole: whether the public run's test request left its first prompt cached
        # is not known, so no prefix reuse is priced (the figures of docs/accuracy.md)
        EngineSettings(engine="vllm", enable_prefix_caching=False),
        stream,
        ["ttft", "tpot"],
        [50.0],
        {},
    )
    s = twin.summary
    return s.latency_ms["ttft"].median / 1000, s.duration, s.latency_ms["tpot"].median


def routing_collisions(ranks: int = 8, trials: int = 20_000) -> tuple[float, float]:
    """vLLM v0.25's internal DP load balancer (v1/engine/core_client.py DPLBAsyncMPClient) as a benchmark's
    first wave meets it: one API server process per DP rank (the default, entrypoints/cli/serve.py) sharing
    the listening socket, so `ranks` connections land on random servers; server i sends its k-th request to
    rank i + k (its own counts: the coordinator's stats come every 100 ms). Returns the mean number of ranks
    that get a prompt and the mean largest number of prompts one rank prefills one after another."""
    rng = random.Random(0)
    distinct = deepest = 0
    for _ in range(trials):
        load = Counter()
        for server, count in Counter(rng.randrange(ranks) for _ in range(ranks)).items():
            load.update((server + k) % ranks for k in range(count))
        distinct += len(load)
        deepest += max(load.values())
    return distinct / trials, deepest / trials


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", action="append", help="h200_sxm, b200_sxm (default: both)")
    ap.add_argument("--model", default=FLASH, help=f"a DeepSeek-V4 checkpoint (default {FLASH})")
    args = ap.parse_args()
    for system in args.system or ["h200_sxm", "b200_sxm"]:
        print(
            f"{args.model} on {system}: input, clients | TP8 / DP8 median TTFT s | TP8/DP8 | makespan s",
            end="",
        )
        print(" | median TPOT ms")
        at = {}
        for isl, clients, osl in POINTS:
            tp, dp = (run(args.model, system, ARMS[arm], isl, clients, osl) for arm in ARMS)
            at[(isl, clients)] = (tp, dp)
            print(
                f"  {isl:>9,} {clients} | {tp[0]:6.1f} / {dp[0]:6.1f} | {tp[0] / dp[0]:4.2f}x"
                f" | {tp[1]:4.0f} / {dp[1]:4.0f} | {tp[2]:6.1f} / {dp[2]:5.1f}"
            )
        tp1, dp8 = at[(1_000_000, 1)][0][0], at[(1_000_000, 8)][1][0]
        x = (dp8 - tp1) * 8 / 7
        print(f"  two-term reading at 1M: I = {dp8 - x:.1f} s, X = {x:.1f} s")
    used, deepest = routing_collisions()
    print(f"vLLM DP routing of 8 prompts at t=0: {used:.2f} ranks used, {deepest:.2f} prompts on the busiest")
    (tp_ttft, tp_span), (dp_ttft, dp_span) = PUBLIC_B200["TP8"], PUBLIC_B200["DP8"]
    x = (dp_ttft - tp_ttft / 4.5) * 8 / 7  # TP8's eight prompts prefill one after another: median 4.5
    print(
        f"public (V4-Flash) 8x B200, 1M, 8 clients: TP8 / DP8 median TTFT {tp_ttft:.0f} / {dp_ttft:.0f} s"
        f" ({tp_ttft / dp_ttft:.2f}x), makespan {tp_span:.0f} / {dp_span:.0f} s;"
        f" I = {dp_ttft - x:.1f} s, X = {x:.1f} s"
    )


if __name__ == "__main__":
    main()
