"""Step latency: the sum of one step's op latencies (from the PerfDB) plus what the engine adds."""

import weakref
from collections.abc import Callable
from functools import lru_cache
from math import ceil, log
from typing import NamedTuple

from servelab.perfdb.db import PerfDB
from servelab.perfdb.keys import OpKey
from servelab.perfdb.latency import OpLatency
from servelab.perfdb.price_cache import PriceStore, pair_digest
from servelab.predict.engines import EngineProfile
from servelab.predict.graph import (
    DECODE_ATTN,
    HEAD,
    PREFILL_ATTN,
    TOKENS,
    Op,
    StepShape,
    op_category,
    per_rank,
    step_ops,
)
from servelab.specs import ModelSpec, Parallel


class StepTime(NamedTuple):
    us: float
    low_us: float
    high_us: float
    kernel_us: float
    overhead_us: float  # what the engine adds: launches and gaps, CPU time, MoE prompt-token cost
    sources: dict  # op count by provenance source
    source_us: dict  # kernel time (us) by provenance source


class KernelSum(NamedTuple):
    us: float
    low_us: float
    high_us: float
    kernels: float
    sources: dict
    source_us: dict

    # Element-wise sum of two kernel sums (tuple concatenation is of no use here)
    def __add__(self, other: "KernelSum") -> "KernelSum":  # type: ignore[override]
        return KernelSum(
            self.us + other.us,
            self.low_us + other.low_us,
            self.high_us + other.high_us,
            self.kernels + other.kernels,
            add_counts(self.sources, other.sources),
            add_counts(self.source_us, other.source_us),
        )


def add_counts(a: dict, b: dict, weight: float = 1.0) -> dict:
    """a + weight x b, key by key."""
    out = dict(a)
    _add_into(out, b, weight)
    return out


def _add_into(out: dict, b: dict, weight: float) -> None:
    """out += weight x b, key by key, in place (add_counts without the copy)."""
    if weight == 1:
        for k, v in b.items():
            out[k] = out.get(k, 0) + v
    else:
        for k, v in b.items():
            out[k] = out.get(k, 0) + weight * v


PartPrice = Callable[[StepShape, str], KernelSum]  # one (model, parallel)'s parts, by shape and part


_NO_ANSWERS: dict[OpKey, OpLatency] = {}  # kernel_sum's cache of a stand-in for a PerfDB: it asks query()


def kernel_sum(ops: list[Op], db: PerfDB) -> KernelSum:
    """Kernel time of the ops; the band assumes op errors are correlated (it adds lows and highs)."""
    kernel = low = high = 0.0
    kernels = 0.0
    sources: dict = {}
    source_us: dict = {}
    query = db.query
    # a PerfDB's answers read from its cache here, not through query() (a call per op, 180,000 a plan); a
    # stand-in for a PerfDB (calibrate's ScaledDB) is asked through query() alone. __class__, not type(): the
    # step prices hold their PerfDB through a weak proxy, which answers its referent's class
    answered = (db._cache if db.__class__ is PerfDB else _NO_ANSWERS).get
    for _, key, c in ops:
        hit = answered(key)
        us, low_us, high_us, source, _ = hit if hit is not None else query(key)
        kernel += us * c
        low += low_us * c
        high += high_us * c
        kernels += abs(c)
        sources[source] = sources.get(source, 0) + 1
        source_us[source] = source_us.get(source, 0.0) + us * c
    return KernelSum(kernel, low, high, kernels, sources, source_us)


def kernel_sum_by_category(ops: list[Op], db: PerfDB) -> KernelSum:
    """kernel_sum of the ops, category by category (graph.OpCategory), with the kernel time keyed by
    (category, source) rather than by source: the parts step_terms splits a step's kernel time from."""
    by_category: dict[str, list[Op]] = {}
    for op in ops:
        by_category.setdefault(op_category(op.name).value, []).append(op)
    sums = {category: kernel_sum(some, db) for category, some in by_category.items()}
    keyed = [
        k._replace(source_us={(category, s): us for s, us in k.source_us.items()})
        for category, k in sums.items()
    ]
    return _summed(keyed[0], keyed[1:]) if keyed else kernel_sum([], db)


def step_time(ops: list[Op], db: PerfDB, engine: EngineProfile, num_seqs: int, decode_only: bool) -> StepTime:
    """Kernel time of the ops, then the engine (num_seqs: sequences this rank's scheduler runs)."""
    return with_engine(kernel_sum(ops, db), engine, num_seqs, decode_only)


def with_engine(
    k: KernelSum,
    engine: EngineProfile,
    num_seqs: int,
    decode_only: bool,
    moe_prompt_tokens: float = 0.0,
    moe_routes: float = 0.0,
    tokens: int | None = None,
) -> StepTime:
    """A step that replays a CUDA graph (replays_graph: a decode-only step within the graph batch limit, or
    for vLLM any step within its largest capture size in tokens) has small gaps between kernels; any other
    step launches eagerly, and the GPU waits for launches when the kernels are shorter than them.
    moe_prompt_tokens: prompt tokens x MoE layers on the step's path, each paying the engine's
    moe_prompt_token_us (MoE work the kernel prices miss; counted with the engine's additions, so that the
    term is exactly its own and the kernel band does not scale it). moe_routes: the MoE layers the step runs
    times the experts each token is routed to, each paying moe_route_us of GPU time and, in an eager step,
    eager_moe_route_us of CPU time that the GPU waits for only when its own work is shorter."""
    kernel, low, high, kernels, sources, source_us = k
    t = engine_terms(kernel, kernels, engine, num_seqs, decode_only, moe_prompt_tokens, moe_routes, tokens)
    # summed in this order since before the terms were named (the same sums, bit for bit)
    overhead = (t.exposed_cpu_us + t.gaps_us) + (t.step_us + t.per_seq_us) + t.moe_prompt_us + t.moe_route_us
    low, high = low * engine.kernel_band_low, high * engine.kernel_band_high
    return StepTime(kernel + overhead, low + overhead, high + overhead, kernel, overhead, sources, source_us)


class EngineTerms(NamedTuple):
    """What an engine adds to a step's kernel time, term by term (us); with_engine's overhead is their sum."""

    exposed_cpu_us: float  # eager CPU work (launches, MoE routing) the GPU waits for: max(0, cpu - gpu)
    launch_cpu_us: float  # of the CPU work: kernels x eager_launch_us (0 in a CUDA graph)
    route_cpu_us: float  # ... and MoE layers x routed experts x eager_moe_route_us (0 in a CUDA graph)
    gaps_us: float  # kernels x kernel_gap_us
    step_us: float  # step_overhead_us
    per_seq_us: float  # per_seq_overhead_us x sequences
    moe_prompt_us: float  # prompt tokens x MoE layers x moe_prompt_token_us
    moe_route_us: float  # MoE layers x routed experts x moe_route_us (GPU)


def replays_graph(engine: EngineProfile, num_seqs: int, decode_only: bool, tokens: int | None) -> bool:
    """Whether the step replays a CUDA graph: a decode-only step of at most cuda_graph_max_batch sequences,
    or, where the engine captures graphs by tokens (graphs_by_tokens: vLLM V1) and the step's tokens on the
    rank are known, any step of at most that many tokens, mixed ones too."""
    if engine.graphs_by_tokens and tokens is not None:
        return tokens <= engine.cuda_graph_max_batch
    return decode_only and num_seqs <= engine.cuda_graph_max_batch


def engine_terms(
    kernel_us: float,
    kernels: float,
    engine: EngineProfile,
    num_seqs: int,
    decode_only: bool,
    moe_prompt_tokens: float,
    moe_routes: float,
    tokens: int | None = None,
) -> EngineTerms:
    """The engine's additions to a step of kernel_us over `kernels` kernels (see with_engine)."""
    route_gpu = moe_routes * engine.moe_route_us
    gpu = kernel_us + route_gpu
    if replays_graph(engine, num_seqs, decode_only, tokens):  # a CUDA graph replays: no launches
        launch_cpu = route_cpu = exposed = 0.0
    else:
        launch_cpu, route_cpu = kernels * engine.eager_launch_us, moe_routes * engine.eager_moe_route_us
        exposed = max(0.0, launch_cpu + route_cpu - gpu)
    return EngineTerms(
        exposed,
        launch_cpu,
        route_cpu,
        kernels * engine.kernel_gap_us,
        engine.step_overhead_us,
        engine.per_seq_overhead_us * num_seqs,
        moe_prompt_tokens * engine.moe_prompt_token_us,
        route_gpu,
    )


def breakdown(ops: list[Op], db: PerfDB) -> dict[str, float]:
    """Kernel time per op role (us), largest first."""
    by_name: dict[str, float] = {}
    for op in ops:
        by_name[op.name] = by_name.get(op.name, 0.0) + db.query(op.key).us * op.count
    return dict(sorted(by_name.items(), key=lambda kv: -kv[1]))


MEMO_ENTRIES = 1 << 16  # priced steps kept per PerfDB; a plan prices ~20,000
# (model, parallel) pairs whose parts are kept, and parts kept per pair: the default plan and the 72-GPU ones
# price 22-25 pairs, at most 800 parts each
MEMO_PAIRS = 64
MEMO_PARTS = 1 << 12


class _Prices:
    """The step and part prices of one PerfDB, which owns them through _PRICES: planners and simulators ask
    for the same shapes many times. Bounded (steps and each pair's parts: least recently used first out;
    pairs: first kept, first out); gone with the PerfDB, which it references only weakly. Parts are kept per
    (model, parallel), so that pricing a step hashes those two once rather than once for each of its
    parts."""

    def __init__(self, db: PerfDB):
        db_proxy = weakref.proxy(db)
        parts: dict = {}  # (model, parallel) -> that pair's part prices by (shape, which)
        kept: dict = {}  # (model, parallel, engine) -> its steps kept across processes, if the db keeps any

        def step(model: ModelSpec, parallel: Parallel, shape: StepShape, engine: EngineProfile) -> StepTime:
            part = parts.get((model, parallel))
            if part is None:
                while len(parts) >= MEMO_PAIRS:  # the pair kept longest goes (a search moves on pair by pair)
                    del parts[next(iter(parts))]
                part = parts[(model, parallel)] = _part_prices(model, parallel, db_proxy)
            price = kept.get((model, parallel, engine))
            if price is None:
                while len(kept) >= MEMO_PAIRS:
                    del kept[next(iter(kept))]
                running = engine.running(model, db_proxy.system)
                price = kept[(model, parallel, engine)] = _kept_steps(model, parallel, running, db_proxy)
            return price(part, shape)

        self.parts = parts
        self.step = lru_cache(maxsize=MEMO_ENTRIES)(step)


def _store(db: PerfDB) -> PriceStore | None:
    """The PerfDB's prices kept across processes (servelab.perfdb.price_cache), or None."""
    keeper = getattr(db, "store", None)  # a stand-in for a PerfDB (calibrate's ScaledDB) keeps nothing
    return keeper() if keeper is not None else None


def _kept_steps(
    model: ModelSpec, parallel: Parallel, engine: EngineProfile, db: PerfDB
) -> Callable[[PartPrice, StepShape], StepTime]:
    """Step prices of one (model, parallel, engine) from its parts, kept across processes with the PerfDB's
    answers where it keeps them: a step an earlier process priced is read, not assembled again."""
    store = _store(db)
    if store is None:
        return lambda part, shape: _price_step(part, model, parallel, shape, engine)
    pair = "step-" + pair_digest(
        model.model_dump_json(), parallel.model_dump_json(), engine.model_dump_json()
    )
    kept = store.parts(pair)

    def price(part: PartPrice, shape: StepShape) -> StepTime:
        found = kept.get(shape)  # kept under the plain tuple, which the shape equals
        if type(found) is tuple and len(found) == len(StepTime._fields):
            return StepTime._make(found)
        st = _price_step(part, model, parallel, shape, engine)
        store.add_part(pair, tuple(shape), tuple(st))
        return st

    return price


def _part_prices(model: ModelSpec, parallel: Parallel, db: PerfDB) -> PartPrice:
    """The kernel sums of one (model, parallel)'s step parts, memoized by (shape, part), and kept across
    processes with the PerfDB's answers where it keeps them (servelab.perfdb.price_cache: a part priced by an
    earlier process is read, not built from its ops again)."""
    store = _store(db)

    def part(shape: StepShape, which: str) -> KernelSum:
        return kernel_sum(step_ops(model, parallel, shape, frozenset((which,))), db)

    if store is None:
        return lru_cache(maxsize=MEMO_PARTS)(part)
    pair = "part-" + pair_digest(model.model_dump_json(), parallel.model_dump_json())

    def kept_part(shape: StepShape, which: str) -> KernelSum:
        # the pair's file read on the first part asked for: a process whose steps were all kept asks for none
        found = store.parts(pair).get((which, shape))  # kept under plain tuples, which these equal
        if type(found) is tuple and len(found) == len(KernelSum._fields):
            return KernelSum._make(found)
        k = part(shape, which)
        store.add_part(pair, (which, tuple(shape)), tuple(k))
        return k

    return lru_cache(maxsize=MEMO_PARTS)(kept_part)


_PRICES: "weakref.WeakKeyDictionary[PerfDB, _Prices]" = weakref.WeakKeyDictionary()


def _prices(db: PerfDB) -> _Prices:
    prices = _PRICES.get(db)
    if prices is None:
        prices = _PRICES[db] = _Prices(db)
    return prices


def priced_step(
    model: ModelSpec, parallel: Parallel, shape: StepShape, engine: EngineProfile, db: PerfDB
) -> StepTime:
    """The time of one step shape, memoized per PerfDB: planners and simulators ask for the same shapes many
    times."""
    return _prices(db).step(model, parallel, shape, engine)


def _price_step(
    part: PartPrice, model: ModelSpec, parallel: Parallel, shape: StepShape, engine: EngineProfile
) -> StepTime:
    """The step is priced in three memoized parts: the attention cores of its prefill chunks, those of its
    decoding sequences, and everything else, which depends only on token counts; a new shape mostly reuses
    parts already priced. Engine costs are per rank: each attention-DP rank is its own scheduler with its own
    CUDA graphs."""
    total, num_seqs, decode_only, moe_prompt_tokens, moe_routes, tokens = step_parts(
        part, model, parallel, shape
    )
    return with_engine(total, engine, num_seqs, decode_only, moe_prompt_tokens, moe_routes, tokens)


def step_terms(
    part: PartPrice, model: ModelSpec, parallel: Parallel, shape: StepShape, engine: EngineProfile
) -> dict[tuple[str, ...], float]:
    """The price of a step shape split by term (us): ("kernel", op category, source) from parts whose
    source_us is keyed so (kernel_sum_by_category), and ("engine", profile field) for each engine term of
    with_engine (the CPU work the GPU waits for shared between launches and MoE routing by their CPU time).
    The terms are _price_step's own, so they add up to its price (to float rounding)."""
    total, num_seqs, decode_only, moe_prompt_tokens, moe_routes, tokens = step_parts(
        part, model, parallel, shape
    )
    t = engine_terms(
        total.us, total.kernels, engine, num_seqs, decode_only, moe_prompt_tokens, moe_routes, tokens
    )
    cpu = t.launch_cpu_us + t.route_cpu_us
    launch_share = t.launch_cpu_us / cpu if cpu > 0 else 0.0
    terms: dict[tuple[str, ...], float] = {("kernel", *key): us for key, us in total.source_us.items()}
    for name, us in (
        ("eager_launch_us", t.exposed_cpu_us * launch_share),
        ("eager_moe_route_us", t.exposed_cpu_us * (1.0 - launch_share)),
        ("kernel_gap_us", t.gaps_us),
        ("step_overhead_us", t.step_us),
        ("per_seq_overhead_us", t.per_seq_us),
        ("moe_prompt_token_us", t.moe_prompt_us),
        ("moe_route_us", t.moe_route_us),
    ):
        terms["engine", name] = us
    return terms


def step_parts(
    part: PartPrice, model: ModelSpec, parallel: Parallel, shape: StepShape
) -> tuple[KernelSum, int, bool, float, float, int]:
    """What with_engine prices a step shape from: its kernel sum, the sequences a rank's scheduler runs,
    whether it is decode-only, its prompt tokens x MoE layers, its MoE layers x routed experts and the
    tokens a rank runs."""
    decode_tokens = shape.decode_batch * (1 + shape.spec_tokens)
    kv = shape.decode_kv_len if shape.spec_tokens else 1  # only the MTP draft layer reads the KV length
    # Token ops see how many tokens a rank has and how many of its sequences sample (LM head), not how the
    # prompt tokens split into chunks: k chunks price as one chunk plus k - 1 more sampling sequences (k - 1
    # tokens off).
    rank = per_rank(shape, parallel)
    prefill_seqs = sum(c for c, _, _ in rank.prefill)
    extra = max(prefill_seqs - 1, 0)
    if model.attention.absorbed_decode or shape.spec_tokens:  # token ops also see the prefill/decode split
        prefill_tokens = rank.total - rank.decode_tokens - extra
        tokens = _token_part(
            part, model, parallel, prefill_tokens, rank.decode + extra, kv, shape.spec_tokens, shape.ranks
        )
    else:  # token ops see only the tokens a rank has
        tokens = _token_part(part, model, parallel, rank.total, 0, kv, 0, shape.ranks)
    parts = [part(StepShape((), max(rank.sampled, 1) * parallel.attn_dp, 1), HEAD)]
    if shape.prefill:
        parts.append(part(StepShape(shape.prefill), PREFILL_ATTN))
    if shape.decode_batch:
        decode = StepShape((), shape.decode_batch, shape.decode_kv_len, shape.spec_tokens)
        parts.append(part(decode, DECODE_ATTN))
    total = _summed(tokens, parts)
    num_seqs = ceil(
        (len(shape.prefill) + shape.decode_batch) / min(shape.ranks or parallel.attn_dp, parallel.attn_dp)
    )
    # a rank's own prompt tokens through every MoE layer of its path (the op graph counts every pp stage's)
    moe_prompt_tokens = (rank.total - rank.decode_tokens) * model.num_moe_layers
    decode_only = not shape.prefill and decode_tokens > 0
    moe_routes = model.num_moe_layers * model.moe.experts_per_token if model.moe else 0
    return total, num_seqs, decode_only, moe_prompt_tokens, moe_routes, rank.total


def _summed(first: KernelSum, rest: list[KernelSum]) -> KernelSum:
    """first + rest[0] + rest[1] + ..., added in that order as KernelSum's + adds them (the same sums, bit
    for bit), into one pair of new dicts rather than a copy of both for each +."""
    us, low, high, kernels, sources, source_us = first
    sources, source_us = dict(sources), dict(source_us)
    for k in rest:
        us, low, high, kernels = us + k.us, low + k.low_us, high + k.high_us, kernels + k.kernels
        _add_into(sources, k.sources, 1)
        _add_into(source_us, k.source_us, 1)
    return KernelSum(us, low, high, kernels, sources, source_us)


GRID_EXACT = 16  # token counts up to here are priced exactly
# above: on a geometric grid, linear in between (token-dependent ops are smooth in the count)
GRID_RATIO = 1.06


def _grid(x: int) -> tuple[int, int, float]:
    """Grid points around x and x's weight on the upper one."""
    if x <= GRID_EXACT:
        return x, x, 0.0
    i = int(log(x / GRID_EXACT) / log(GRID_RATIO))
    lo, hi = round(GRID_EXACT * GRID_RATIO**i), round(GRID_EXACT * GRID_RATIO ** (i + 1))
    lo, hi = min(lo, x), max(hi, x)
    return lo, hi, (x - lo) / (hi - lo) if hi > lo else 0.0


def _token_part(
    part: PartPrice,
    model: ModelSpec,
    parallel: Parallel,
    prefill_tokens: int,
    decode_batch: int,
    kv: int,
    spec: int,
    ranks: int = 0,
) -> KernelSum:
    """The token-dependent ops of a step whose every attention rank with work (`ranks`, 0: all) has one
    prefill chunk of prefill_tokens and decode_batch decoding sequences: priced on a grid of the two, bilinear
    in between, so steps that differ by a few tokens share their prices."""
    p0, p1, wp = _grid(prefill_tokens)
    d0, d1, wd = _grid(decode_batch)
    dp = min(ranks or parallel.attn_dp, parallel.attn_dp)

    def at(p: int, d: int) -> KernelSum:
        shape = StepShape(((p, 0),) * dp if p else (), d * dp, kv, spec, ranks)
        return part(shape, TOKENS)

    # a count on a grid point has one neighbour: its corners are the same part, priced (looked up) once
    k00 = at(p0, d0)
    k10 = at(p1, d0) if p1 != p0 else k00
    k01 = at(p0, d1) if d1 != d0 else k00
    k11 = k10 if d1 == d0 else (k01 if p1 == p0 else at(p1, d1))
    corners = [
        (k00, (1 - wp) * (1 - wd)),
        (k10, wp * (1 - wd)),
        (k01, (1 - wp) * wd),
        (k11, wp * wd),
    ]
    us = low = high = kernels = 0.0
    source_us: dict = {}
    for k, w in corners:
        us, low, high, kernels = (
            us + w * k.us,
            low + w * k.low_us,
            high + w * k.high_us,
            kernels + w * k.kernels,
        )
        _add_into(source_us, k.source_us, w)
    return KernelSum(us, low, high, kernels, corners[0][0].sources, source_us)
