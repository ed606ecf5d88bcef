"""Timing helpers the device scripts (scripts/time_vllm_*.py) share: a kernel's GPU time by
triton.testing.do_bench, one call's host time, and a call captured in a CUDA graph. Imported by those scripts
as a sibling module (they run as `python3 scripts/<name>.py`, which puts scripts/ on the import path)."""

import time

import torch
import triton


def bench(fn, warmup_ms: float) -> tuple[float, float, float]:
    """Median, p10, p90 in microseconds. The warm-up is long: with 5 ms, launches of 10-50 us came out up to
    2x slow in a repeat run (most likely timed while the clocks rose again after the GPU idled through a
    compile)."""
    p10, p50, p90 = triton.testing.do_bench(fn, warmup=warmup_ms, rep=25, quantiles=[0.1, 0.5, 0.9])
    return p50 * 1e3, p10 * 1e3, p90 * 1e3


def host_time(fn, calls: int = 30) -> tuple[float, float, float]:
    """Median, p10, p90 of the host's time per call in microseconds: Python plus launches, no sync between
    calls (the GPU queue stays far from full), so it is what one launch of fn costs the CPU."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    times.sort()
    return times[calls // 2], times[calls // 10], times[calls * 9 // 10]


def graphed(fn):
    """fn captured in a CUDA graph, as vLLM's decode steps replay the layer: GPU time, no launch costs."""
    fn()  # JIT-compiles and warms everything the capture will hit
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay
