"""Step latency: the sum of one step's op latencies (from the PerfDB) plus what the engine adds."""

from functools import lru_cache
from math import ceil
from typing import NamedTuple

from servelab.perfdb.db import PerfDB
from servelab.predict.backends import EngineProfile
from servelab.predict.graph import DECODE_ATTN, PREFILL_ATTN, TOKENS, Op, StepShape, step_ops


class StepTime(NamedTuple):
    us: float
    low_us: float
    high_us: float
    kernel_us: float
    overhead_us: float
    sources: dict  # op count by provenance source


class KernelSum(NamedTuple):
    us: float
    low_us: float
    high_us: float
    kernels: float
    sources: dict

    def __add__(self, other: "KernelSum") -> "KernelSum":
        sources = dict(self.sources)
        for s, n in other.sources.items():
            sources[s] = sources.get(s, 0) + n
        return KernelSum(self.us + other.us, self.low_us + other.low_us, self.high_us + other.high_us,
                         self.kernels + other.kernels, sources)


def kernel_sum(ops: list[Op], db: PerfDB) -> KernelSum:
    """Kernel time of the ops; the band assumes op errors are correlated (it adds lows and highs)."""
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
        kernels += abs(c)
        sources[lat.source] = sources.get(lat.source, 0) + 1
    return KernelSum(kernel, low, high, kernels, sources)


def step_time(ops: list[Op], db: PerfDB, engine: EngineProfile, num_seqs: int, decode_only: bool) -> StepTime:
    """Kernel time of the ops, then the engine (num_seqs: sequences this rank's scheduler runs)."""
    return with_engine(kernel_sum(ops, db), engine, num_seqs, decode_only)


def with_engine(k: KernelSum, engine: EngineProfile, num_seqs: int, decode_only: bool) -> StepTime:
    """A decode-only step within the CUDA-graph batch limit replays a graph (small gaps between kernels); any
    other step launches eagerly, and the GPU waits for launches when the kernels are shorter than them."""
    kernel, low, high, kernels, sources = k
    graphed = decode_only and num_seqs <= engine.cuda_graph_max_batch
    if graphed:
        launch = kernels * engine.kernel_gap_us
    else:
        launch = max(0.0, kernels * engine.eager_launch_us - kernel) + kernels * engine.kernel_gap_us
    overhead = launch + engine.overhead_us(num_seqs)
    low, high = low * engine.kernel_band_low, high * engine.kernel_band_high
    return StepTime(kernel + overhead, low + overhead, high + overhead, kernel, overhead, sources)


def breakdown(ops: list[Op], db: PerfDB) -> dict[str, float]:
    """Kernel time per op role (us), largest first."""
    by_name: dict[str, float] = {}
    for op in ops:
        by_name[op.name] = by_name.get(op.name, 0.0) + db.query(op.key).us * op.count
    return dict(sorted(by_name.items(), key=lambda kv: -kv[1]))


@lru_cache(maxsize=1 << 16)
def priced_step(model, parallel, shape: StepShape, engine: EngineProfile, db: PerfDB) -> StepTime:
    """The time of one step shape, memoized: planners and simulators ask for the same shapes many times.

    The step is priced in three memoized parts: the attention cores of its prefill chunks, those of its decoding
    sequences, and everything else, which depends only on token counts; a new shape mostly reuses parts already
    priced. Engine costs are per rank: each attention-DP rank is its own scheduler with its own CUDA graphs."""
    decode_tokens = shape.decode_batch * (1 + shape.spec_tokens)
    prefill_tokens = sum(n for n, _ in shape.prefill)
    kv = shape.decode_kv_len if shape.spec_tokens else 1  # only the MTP draft layer reads the KV length
    if len(shape.prefill) > 1:  # token ops see how many sequences sample (LM head), not how the chunks split
        tokens = _priced_part(model, parallel, shape._replace(decode_kv_len=kv), TOKENS, db)
    else:
        merged = StepShape(((prefill_tokens, 0),) if prefill_tokens else (), shape.decode_batch, kv, shape.spec_tokens)
        tokens = _priced_part(model, parallel, merged, TOKENS, db)
    total = tokens
    if shape.prefill:
        total = total + _priced_part(model, parallel, StepShape(shape.prefill), PREFILL_ATTN, db)
    if shape.decode_batch:
        decode = StepShape((), shape.decode_batch, shape.decode_kv_len, shape.spec_tokens)
        total = total + _priced_part(model, parallel, decode, DECODE_ATTN, db)
    num_seqs = ceil((len(shape.prefill) + shape.decode_batch) / parallel.attn_dp)
    return with_engine(total, engine, num_seqs, decode_only=not shape.prefill and decode_tokens > 0)


@lru_cache(maxsize=1 << 16)
def _priced_part(model, parallel, shape: StepShape, part: str, db: PerfDB) -> KernelSum:
    return kernel_sum(step_ops(model, parallel, shape, frozenset((part,))), db)
