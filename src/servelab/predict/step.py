"""Step latency: the sum of one step's op latencies (from the PerfDB) plus what the engine adds."""

from functools import lru_cache
from typing import NamedTuple

from servelab.perfdb.db import PerfDB
from servelab.predict.backends import EngineProfile
from servelab.predict.graph import Op, StepShape, step_ops


class StepTime(NamedTuple):
    us: float
    low_us: float
    high_us: float
    kernel_us: float
    overhead_us: float
    sources: dict  # op count by provenance source


def step_time(ops: list[Op], db: PerfDB, engine: EngineProfile, num_seqs: int, decode_only: bool) -> StepTime:
    """Kernel time of the ops, then the engine: a decode-only step within the CUDA-graph batch limit replays a
    graph (small gaps between kernels); any other step launches eagerly, and the GPU waits for launches when the
    kernels are shorter than them. The band assumes op errors are correlated (it adds lows and highs)."""
    kernel = low = high = 0.0
    kernels = 0.0
    sources: dict = {}
    query = db.query
    for op in ops:
        lat = query(op.key)
        c = op.count
        kernel += lat.us * c
        low += lat.low_us * c
        high += lat.high_us * c
        kernels += c
        sources[lat.source] = sources.get(lat.source, 0) + 1
    graphed = decode_only and num_seqs <= engine.cuda_graph_max_batch
    if graphed:
        launch = kernels * engine.kernel_gap_us
    else:
        launch = max(0.0, kernels * engine.eager_launch_us - kernel) + kernels * engine.kernel_gap_us
    overhead = launch + engine.overhead_us(num_seqs)
    return StepTime(kernel + overhead, low + overhead, high + overhead, kernel, overhead, sources)


def breakdown(ops: list[Op], db: PerfDB) -> dict[str, float]:
    """Kernel time per op role (us), largest first."""
    by_name: dict[str, float] = {}
    for op in ops:
        by_name[op.name] = by_name.get(op.name, 0.0) + db.query(op.key).us * op.count
    return dict(sorted(by_name.items(), key=lambda kv: -kv[1]))


@lru_cache(maxsize=1 << 16)
def priced_step(model, parallel, shape: StepShape, engine: EngineProfile, db: PerfDB) -> StepTime:
    """The time of one step shape, memoized: planners and simulators ask for the same shapes many times."""
    num_seqs = len(shape.prefill) + shape.decode_batch
    return step_time(step_ops(model, parallel, shape), db, engine, num_seqs, decode_only=not shape.prefill)
