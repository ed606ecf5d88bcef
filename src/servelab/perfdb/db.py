"""PerfDB: answers op latency queries for one system and backend, from perf tables where they have data and
from the roofline elsewhere. Answers are cached: the same key asked twice costs a dict lookup.

A backend is priced from tables collected with that backend only. The shipped H200 tables time torch's kernels
(cuBLAS, SDPA, servelab's reference MoE / MLA / DeepSeek-V4 kernels), not the engines' (CUTLASS, FlashMLA, fused
MoE, custom all-reduce): priced from them, engine TPOT was off by 35.6 % (median, leave one model out, 525
measured H200 rows), against 24.1 % from the roofline (docs/accuracy.md, section 4)."""

from servelab.perfdb.keys import OpKey
from servelab.perfdb.latency import OpLatency
from servelab.perfdb.roofline import Roofline
from servelab.specs import SystemSpec


class PerfDB:
    def __init__(self, system: SystemSpec, tables=None, use_tables: bool = True, backend: str = "torch"):
        """tables: an object with .lookup(key) -> OpLatency | None (servelab.perfdb.tables); by default the
        tables collected for this system with this backend, if any."""
        self.system = system
        self.roofline = Roofline(system)
        if tables is None and use_tables:
            tables = _default_tables(system, backend)
        self.tables = tables
        self._cache: dict = {}

    def query(self, key: OpKey) -> OpLatency:
        hit = self._cache.get(key)
        if hit is None:
            hit = self._resolve(key)
            self._cache[key] = hit
        return hit

    def _resolve(self, key: OpKey) -> OpLatency:
        if self.tables is not None:
            found = self.tables.lookup(key)
            if found is not None:
                return found
        return self.roofline.latency(key)


_DEFAULT_TABLES: dict = {}


def _default_tables(system: SystemSpec, backend: str):
    """The tables for this system and backend (loaded once per process), or None when there are none."""
    key = (system.name, backend)
    if key not in _DEFAULT_TABLES:
        try:
            from servelab.perfdb.tables import load_default_tables
        except ImportError:
            _DEFAULT_TABLES[key] = None
        else:
            _DEFAULT_TABLES[key] = load_default_tables(system, backend)
    return _DEFAULT_TABLES[key]


_DBS: dict = {}


def perfdb_for(system: SystemSpec, backend: str = "torch") -> PerfDB:
    """One shared PerfDB per system and backend per process, so its cache is reused across estimates."""
    key = (system.name, backend)
    db = _DBS.get(key)
    if db is None:
        db = _DBS[key] = PerfDB(system, backend=backend)
    return db
