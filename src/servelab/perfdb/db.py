"""PerfDB: answers op latency queries for one system and backend, from perf tables where they have data and
from the roofline elsewhere. Answers are cached: the same key asked twice costs a dict lookup."""

from servelab.perfdb.keys import OpKey
from servelab.perfdb.latency import OpLatency
from servelab.perfdb.roofline import Roofline
from servelab.specs import SystemSpec


class PerfDB:
    def __init__(self, system: SystemSpec, tables=None, use_tables: bool = True):
        """tables: an object with .lookup(key) -> OpLatency | None (servelab.perfdb.tables); by default the
        embedded tables for this system, if any."""
        self.system = system
        self.roofline = Roofline(system)
        if tables is None and use_tables:
            tables = _default_tables(system)
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


def _default_tables(system: SystemSpec):
    """The embedded tables for this system (loaded once per process), or None when there are none."""
    if system.name not in _DEFAULT_TABLES:
        try:
            from servelab.perfdb.tables import load_default_tables
        except ImportError:
            _DEFAULT_TABLES[system.name] = None
        else:
            _DEFAULT_TABLES[system.name] = load_default_tables(system)
    return _DEFAULT_TABLES[system.name]


_DBS: dict = {}


def perfdb_for(system: SystemSpec) -> PerfDB:
    """One shared PerfDB per system per process, so its cache is reused across estimates."""
    db = _DBS.get(system.name)
    if db is None:
        db = _DBS[system.name] = PerfDB(system)
    return db
