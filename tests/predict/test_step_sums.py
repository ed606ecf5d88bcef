"""The shortcuts a cold plan's step pricing takes give what the general paths give: per_rank's prompt
chunks grouped without sorting where there is one or they are all alike, a step's parts summed into one pair
of dicts, kernel_sum reading a PerfDB's answer cache directly (a stand-in for a PerfDB is asked through
query())."""

import itertools
import weakref
from math import ceil

import pytest

from servelab.perfdb.db import PerfDB
from servelab.perfdb.keys import Gemm, Memory
from servelab.perfdb.latency import OpLatency
from servelab.predict.graph import Op, StepShape, per_rank
from servelab.predict.step import KernelSum, _summed, kernel_sum
from servelab.specs import Parallel, load_system


def grouped(shape: StepShape, parallel: Parallel) -> tuple:
    """The per-rank prompt chunks as the general rule groups them: alike chunks counted, sorted."""
    counts: dict = {}
    for chunk in shape.prefill:
        counts[chunk] = counts.get(chunk, 0) + 1
    return tuple((ceil(c / parallel.attn_dp), n, p) for (n, p), c in sorted(counts.items()))


@pytest.mark.parametrize(
    "prefill",
    [(), ((512, 0),), ((512, 0),) * 8, ((512, 0),) * 3, ((64, 0), (512, 128), (64, 0)), ((7, 9),) * 16],
)
@pytest.mark.parametrize("parallel", [Parallel(tp=8), Parallel(tp=8, ep=8, dp_attn=True)])
def test_per_rank_groups_chunks_as_the_general_rule(prefill, parallel):
    shape = StepShape(prefill=prefill, decode_batch=5, decode_kv_len=300)
    t = per_rank(shape, parallel)
    assert t.prefill == grouped(shape, parallel)
    assert t.total == sum(c * n for c, n, _ in t.prefill) + t.decode_tokens


def test_summed_is_the_chained_sum_bit_for_bit():
    parts = [
        KernelSum(1.1, 0.9, 1.3, 3.0, {"measured": 2, "roofline": 1}, {"measured": 0.7, "roofline": 0.4}),
        KernelSum(0.1, 0.07, 0.2, 1.0, {"transferred": 1}, {"transferred": 0.1}),
        KernelSum(2.3, 2.0, 2.9, 2.0, {"roofline": 2}, {"roofline": 2.3}),
        KernelSum(1e-3, 1e-3, 1e-3, 1.0, {"measured": 1}, {"measured": 1e-3}),
    ]
    for first, *rest in itertools.permutations(parts):
        chained = first
        for k in rest:
            chained = chained + k
        summed = _summed(first, rest)
        assert summed == chained
        assert list(summed.sources) == list(chained.sources)  # the same keys in the same order
        assert list(summed.source_us) == list(chained.source_us)
    assert parts[0].sources == {"measured": 2, "roofline": 1}  # the first part's dicts are not written to


class _Halved:
    """A stand-in for a PerfDB (as calibrate's ScaledDB is): only query()."""

    def __init__(self, db: PerfDB):
        self.db = db

    def query(self, key):
        a = self.db.query(key)
        return OpLatency(a.us / 2, a.low_us / 2, a.high_us / 2, a.source, a.note)


def test_kernel_sum_asks_a_stand_in_through_query():
    db = PerfDB(load_system("h200_sxm"))
    ops = [Op("a", Gemm(100, 4096, 4096), 2), Op("b", Memory(1 << 20), 1), Op("a", Gemm(100, 4096, 4096), -1)]
    full = kernel_sum(ops, db)
    half = kernel_sum(ops, _Halved(db))  # type: ignore[arg-type]
    assert half.us == pytest.approx(full.us / 2)
    assert full.us == pytest.approx(sum(db.query(op.key).us * op.count for op in ops))
    assert full.sources == half.sources


@pytest.mark.parametrize("proxied", [False, True])
def test_kernel_sum_reads_a_perfdbs_answers_without_asking_again(proxied):
    """Answers already in a PerfDB's cache are read, not asked for again through query(), also through the
    weak proxy the step prices hold their PerfDB by; a key not answered yet is asked for once."""
    db = PerfDB(load_system("h200_sxm"))
    known, new = Gemm(100, 4096, 4096), Memory(1 << 20)
    db.query(known)
    asked: list = []
    resolve = db.query

    def counted(key):
        asked.append(key)
        return resolve(key)

    db.query = counted  # type: ignore[method-assign]
    held = weakref.proxy(db) if proxied else db
    ops = [Op("a", known, 2), Op("b", new, 1), Op("a", known, -1)]
    k = kernel_sum(ops, held)  # type: ignore[arg-type]
    assert asked == [new]
    assert k.us == sum(resolve(op.key).us * op.count for op in ops)
