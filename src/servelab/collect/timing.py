"""The one timing method of the collector: the one that gave repeatable numbers on the H200.

Random inputs in enough rotating sets that one replay touches at least ROTATE_BYTES (the H200 L2 is 60 MB),
the op captured several times into one CUDA graph so a replay lasts about TARGET_REPLAY_MS, CUDA events around
each replay, warm-up first, then the median, p10 and p90 over replays (each divided by the captures per
replay). Where capture fails (an op that syncs with the host) the same loop runs eagerly and the row says
timing=eager.

torch is imported inside the functions: the core install has no torch. The device is behind a Clock: the CUDA
one times GPU work with events and graphs; HostClock times host work with perf_counter (no graphs), so tests
of the collector run this very loop on a machine without a GPU.
"""

import math
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager

from servelab.metrics import percentile

ROTATE_BYTES = 256 << 20  # per replay, so that no replay reads what the last one left in L2
MAX_SETS = 32
MAX_ROTATE_TOTAL = 24 << 30  # never hold more than this in rotating copies
TARGET_REPLAY_MS = 2.0
MAX_INNER = 256
WARMUP_REPLAYS = 3
MIN_REPS, MAX_REPS, MAX_SECONDS = 15, 100, 1.0  # replays per key: at least 15, at most 100 or about 1 s


class Timing(dict):
    """latency_us (median), p10_us, p90_us, reps (replays), inner (op calls per replay), timing
    (graph|eager)."""


class CudaClock:
    """GPU time: CUDA events around each replay, CUDA graphs where the op can be captured."""

    def sync(self) -> None:
        import torch  # noqa: PLC0415 - torch is an optional extra (the core install has none)

        torch.cuda.synchronize()

    def timed(self, samples: list):
        return cuda_timed(samples)

    def elapsed_us(self, samples: list) -> list[float]:
        return elapsed_us(samples)

    def capture(self, run, sets, inner):
        return _capture(run, sets, inner)

    def check_finite(self, out) -> None:
        _check_finite(out)


class HostClock:
    """Host time (perf_counter), no graphs: the same loop for ops run on the CPU (the collector's tests)."""

    def sync(self) -> None:
        return None

    @contextmanager
    def timed(self, samples: list):
        start = time.perf_counter()
        yield
        samples.append((start, time.perf_counter()))

    def elapsed_us(self, samples: list) -> list[float]:
        return [(end - start) * 1e6 for start, end in samples]

    def capture(self, run, sets, inner):
        return None

    def check_finite(self, out) -> None:
        values = out if isinstance(out, (tuple, list)) else (out,)
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise FloatingPointError("op output holds NaN or inf")


@contextmanager
def cuda_timed(samples: list):
    """Record CUDA events around the block; append the (start, end) pair to samples. Read them with
    elapsed_us(samples) after a synchronize: events never block the launching thread."""
    import torch  # noqa: PLC0415 - torch is an optional extra (the core install has none)

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    yield
    end.record()
    samples.append((start, end))


def elapsed_us(samples: list) -> list[float]:
    import torch  # noqa: PLC0415 - torch is an optional extra (the core install has none)

    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1000 for s, e in samples]


def summarize(per_call_us: list[float], inner: int, mode: str) -> Timing:
    ordered = sorted(per_call_us)
    return Timing(
        latency_us=statistics.median(ordered),
        p10_us=percentile(ordered, 10),
        p90_us=percentile(ordered, 90),
        reps=len(per_call_us),
        inner=inner,
        timing=mode,
    )


def num_sets(bytes_per_set: int) -> int:
    """Input sets to rotate through so one pass over them is at least ROTATE_BYTES."""
    if bytes_per_set <= 0:
        return 1
    n = math.ceil(ROTATE_BYTES / bytes_per_set)
    n = min(n, MAX_SETS, max(1, MAX_ROTATE_TOTAL // bytes_per_set))
    return max(1, n)


def time_op(
    make_inputs: Callable[[], tuple],
    run: Callable,
    bytes_per_set: int,
    max_seconds: float = MAX_SECONDS,
    min_reps: int = MIN_REPS,
    max_reps: int = MAX_REPS,
    graph: bool = True,
    agree: Callable | None = None,
    check_output: bool = True,
    clock=None,
) -> Timing:
    """Time run(*inputs) over rotating input sets.

    make_inputs() builds one fresh random input set (a tuple of tensors); run(*inputs) launches the op and
    returns its output (checked for NaN/inf once, before timing). bytes_per_set sizes the rotation.
    agree(estimate_us) -> estimate_us makes ranks of a collective use one estimate (the same captured calls).
    clock: CudaClock (the default) or HostClock.
    """
    clock = clock or CudaClock()
    sets = [make_inputs() for _ in range(num_sets(bytes_per_set))]
    out = run(*sets[0])
    clock.sync()
    if check_output:
        clock.check_finite(out)
    del out
    # eager estimate of one call decides how many calls fit in one replay
    est_us = _eager_estimate(run, sets, clock)
    if agree is not None:
        est_us = agree(est_us)
    inner = max(1, min(MAX_INNER, round(TARGET_REPLAY_MS * 1000 / max(est_us, 1.0))))
    replay = None
    mode = "eager"
    if graph:
        replay = clock.capture(run, sets, inner)
        if replay is not None:
            mode = "graph"
    if replay is None:

        def replay():
            for i in range(inner):
                run(*sets[i % len(sets)])

    for _ in range(WARMUP_REPLAYS):
        replay()
    clock.sync()
    per_replay_ms = max(est_us * inner / 1000, 1e-3)
    reps = int(min(max_reps, max(min_reps, max_seconds * 1000 / per_replay_ms)))
    samples: list = []
    for _ in range(reps):
        with clock.timed(samples):
            replay()
    per_call = [us / inner for us in clock.elapsed_us(samples)]
    return summarize(per_call, inner, mode)


def _eager_estimate(run, sets, clock) -> float:
    for i in range(2):
        run(*sets[i % len(sets)])
    n = 5
    samples: list = []
    with clock.timed(samples):
        for i in range(n):
            run(*sets[i % len(sets)])
    return clock.elapsed_us(samples)[0] / n


def _capture(run, sets, inner):
    """A replay function for a CUDA graph of `inner` calls, or None when the op cannot be captured."""
    import torch  # noqa: PLC0415 - torch is an optional extra (the core install has none)

    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up on the side stream, as capture requires
            for i in range(2):
                run(*sets[i % len(sets)])
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(inner):
                run(*sets[i % len(sets)])
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - any capture failure falls back to eager timing
        torch.cuda.synchronize()
        return None
    return g.replay


def _check_finite(out) -> None:
    import torch  # noqa: PLC0415 - torch is an optional extra (the core install has none)

    tensors = out if isinstance(out, (tuple, list)) else (out,)
    for t in tensors:
        if (
            isinstance(t, torch.Tensor)
            and t.is_floating_point()
            and t.numel()
            and not bool(torch.isfinite(t.float() if t.element_size() < 2 else t).all())
        ):
            raise FloatingPointError("op output holds NaN or inf")
