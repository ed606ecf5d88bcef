"""Simulations kept across processes: what `simulate` answered for a load is stored with the prices of the
PerfDB that priced its steps (servelab.perfdb.price_cache), so that a later process asking the same question
reads the answer rather than simulating again (a warm `servelab plan` spent 0.5-0.9 s of its 1.0-1.2 s in
its 200-450 simulations, for answers an earlier run had already found).

The answer of a simulation is a function of its inputs: the model, parallel layout, engine profile and memory
breakdown it was given, the step pricer's (its model, layout, engine, draft tokens and attention ranks), the
workload and whether requests arrive prefilled, with the prices of the PerfDB, whose store is named by a
digest of the tables, the source of the packages that compute (the whole of predict, this simulator
included) and servelab's version. The first four and the pricer's make a file's name, the rest the entry's
tag; a result is kept as plain values (floats, ints, lists, tuples and dicts, which marshal writes exactly:
float bits and order included) and read back into the same SimResult, its run time aside (`wall_ms` is the
time of the call that read it), with the latency distributions the keeping process made from its samples (a
plan reads a statistic or two of each simulation: 1,600 distributions of a 72-GPU plan, 0.05 s made
again). A simulation read back adds to its pricer's count of shapes priced what it added when it ran
(`servelab estimate` reports that count; a pricer shared by several simulations, a plan's, counts each shape
once when they run, so its count read back can differ from that, and nothing reports it). A pricer whose
PerfDB keeps nothing (the cache is off, or calibrate's stand-in for a PerfDB) keeps no
simulations either.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from servelab.perfdb.price_cache import PriceStore, pair_digest
from servelab.predict.serving.engine import LaneStats
from servelab.predict.serving.pricing import StepPricer
from servelab.predict.serving.workload import Workload

if TYPE_CHECKING:  # the results are made by servelab.predict.serving.aggregated, which imports this module
    from servelab.predict.serving.aggregated import SimResult

STATS = tuple(f.name for f in fields(LaneStats))
# output_tps, request_tps, lanes, stats, requests, kv_max_sequences, samples, the distributions made from the
# samples by the end of the process that kept it, and the shapes the simulation priced (StepPricer.priced)
VALUE_FIELDS = 9


class KeptSims:
    """The kept simulations of one (model, layout, engine, memory, pricer): a file of the pricer's store."""

    def __init__(self, store: PriceStore, inputs: tuple, pair: str):
        self.store, self.inputs, self.pair = store, inputs, pair
        self.kept: dict | None = None  # read on first use

    def tag(self, wl: Workload, prefilled: bool, osl_override: int | None, pricer: StepPricer) -> tuple:
        return (wl.model_dump_json(), prefilled, osl_override, pricer.spec_tokens, pricer.ranks)

    def get(self, tag: tuple) -> tuple | None:
        if self.kept is None:
            self.kept = self.store.parts(self.pair)
        found = self.kept.get(tag)
        return found if type(found) is tuple and len(found) == VALUE_FIELDS else None

    def add(self, tag: tuple, sim: SimResult, priced: int) -> None:
        """Keep `sim`; `priced`: the step shapes its pricer priced for it (servelab estimate reports them)."""
        st = sim.stats
        value = (
            sim.output_tps,
            sim.request_tps,
            sim.lanes,
            tuple(getattr(st, name) for name in STATS),
            sim.requests,
            sim.kv_max_sequences,
            sim.samples,
            sim._distributions,  # written at exit: with those the process asked for by then
            priced,
        )
        self.store.add_part(self.pair, tag, value)


_FILES: WeakKeyDictionary[StepPricer, KeptSims | None] = WeakKeyDictionary()


def kept_sims(model: Any, parallel: Any, engine: Any, mem: Any, pricer: StepPricer) -> KeptSims | None:
    """The kept simulations of these inputs, or None where the pricer's PerfDB keeps nothing. Found once a
    pricer (a search simulates each config's loads with its one pricer)."""
    inputs = (model, parallel, engine, mem)
    if pricer in _FILES:
        found = _FILES[pricer]
        if found is None or all(a is b for a, b in zip(found.inputs, inputs, strict=True)):
            return found
    keeper = getattr(pricer.db, "store", None)  # a stand-in for a PerfDB (calibrate's ScaledDB) keeps nothing
    store = keeper() if keeper is not None else None
    made = None
    if store is not None:
        dumps = [x.model_dump_json() for x in (*inputs, pricer.model, pricer.parallel, pricer.engine)]
        made = KeptSims(store, inputs, "sim-" + pair_digest(*dumps))
    _FILES[pricer] = made
    return made


def stats_of(values: Any) -> LaneStats | None:
    """The lane statistics kept as a tuple of their fields, or None where they are of another layout."""
    if type(values) is not tuple or len(values) != len(STATS):
        return None
    return LaneStats(*values)
