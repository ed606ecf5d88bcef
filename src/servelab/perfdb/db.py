"""PerfDB: answers op latency queries for one system and backend, each from the best evidence there is, and
says which. Answers are cached: the same key asked twice costs a dict lookup.

The order, for a key of an engine backend (vllm, sglang, trtllm), exact shapes before borrowed ones:
1. the table of the kernel the engine runs for that key at its release on this GPU, where the engine picks its
   kernel by shape, dtype, GPU or release (servelab.engines' KernelChoice: vLLM's DeepGEMM MoE for block-FP8
   experts, its Marlin MoE for MXFP4 and FP4 experts on Hopper), where that table holds the key's shape
   (measured, or between or beyond collected token counts; never borrowed from another shape);
2. the engine's own tables on this system, newest release first (up to the release asked for);
3. the same tables of another GPU of the same architecture (compute capability), carried over (source
   `transferred`): the engine's kernels are the same binaries there, so the shape behaviour a ratio cannot
   hold (FlashMLA pads 8 heads to 64) carries over;
4. the torch tables times the engine's fitted torch-to-engine ratio of the op's family (perfdb.ratios; source
   `calibrated`), where one was fitted;
5. another system's answer from its steps 1-2, else from its steps 1-4, carried over by the two systems'
   rooflines for the key and a fitted efficiency (perfdb.transfer; source `transferred`);
6. the roofline: the engine's own for an engine backend (its kernels' rules: MXFP4 and INT4 experts,
   peer all-reduce).
Steps 1, 2 and 4 are tried with the key's shape first, then with another shape's utilisation (borrowed).
The torch backend (servelab's own kernels, no engine) takes steps 2, 3, 5 and 6.

The shipped H200 torch tables time torch's kernels (cuBLAS, SDPA, servelab's reference MoE / MLA / DeepSeek-V4
kernels), not the engines' (CUTLASS, FlashMLA, fused MoE, custom all-reduce): priced from them unscaled,
engine TPOT was off by 35.6 % (median, leave one model out, 525 measured H200 rows), against 24.1 % from the
roofline (docs/accuracy.md, section 4); that is why step 4 needs a fitted ratio and is skipped without one."""

from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Generic, Protocol, TypeVar

from servelab.engines import KernelChoice, engine_of, is_engine, kernel_choices
from servelab.engines.version import Version
from servelab.perfdb import price_cache
from servelab.perfdb.families import BY_OP
from servelab.perfdb.keys import OpKey
from servelab.perfdb.latency import OpLatency
from servelab.perfdb.price_cache import PriceStore, store_for
from servelab.perfdb.ratios import RatioFile, read_ratios, scaled
from servelab.perfdb.roofline import Roofline
from servelab.perfdb.tables import DEFAULT_BACKEND, TableSet, table_dirs, tables_with_data
from servelab.perfdb.transfer import TransferFit, read_transfer, transferred
from servelab.specs import SystemSpec, load_system

# answers read from a table (a kernel table's are taken only when they hold the key's shape)
TABLE_SOURCES = ("measured", "interpolated", "extrapolated")
# systems other systems' answers are carried from, preferred in this order after those of the same GPU
# generation (compute capability)
TRANSFER_PREFERENCE = ("h200_sxm", "h100_sxm")

K = TypeVar("K")
V = TypeVar("V")


class Tables(Protocol):
    def lookup(self, key: OpKey, borrow: bool = True) -> OpLatency | None: ...


def _lookup(tables: Tables, key: OpKey, borrow: bool, roofline: bool) -> OpLatency | None:
    """tables.lookup(key, borrow); with `roofline` off, None for a roofline answer, which the default tables
    (TableStack, TableSet) then do not make (tables a caller names are asked as before)."""
    if isinstance(tables, (TableStack, TableSet)):
        return tables.lookup(key, borrow=borrow, roofline=roofline)
    found = tables.lookup(key, borrow=borrow)
    return None if not roofline and found is not None and found.source == "roofline" else found


class BoundedCache(Generic[K, V]):
    """A least-recently-used map of at most `maxsize` entries."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The entry for key, made (and the oldest entry dropped beyond maxsize) when missing."""
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        value = self._items[key] = make()
        if len(self._items) > self.maxsize:
            self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


class TableStack:
    """One backend's table directories on one system, newest release first: a key is answered by the first
    set that holds its shape, else by the first that can borrow another shape's utilisation."""

    def __init__(self, sets: list[TableSet], root: Path | None = None):
        self.sets = sets
        self.root = root  # the search-path root they came from, which also holds the fits made from them

    def lookup(self, key: OpKey, borrow: bool = True, roofline: bool = True) -> OpLatency | None:
        """roofline: off, None rather than a roofline answer (TableSet.lookup's)."""
        fallback = None
        for may_borrow in (False, True) if borrow else (False,):
            for tables in self.sets:
                # a roofline answer is kept only while none is (the first one found is the answer's)
                found = tables.lookup(key, borrow=may_borrow, roofline=roofline and fallback is None)
                if found is None:
                    continue
                if found.source != "roofline":
                    return found
                fallback = fallback or found
        return fallback


def table_stack(system: SystemSpec, backend: str, version: Version | None = None) -> TableStack | None:
    """The tables collected with `backend` on this system, newest release first, up to `version`, from the
    first search-path root that has any (SERVELAB_PERFDB_PATH's replace the embedded ones, as a whole)."""
    dirs = table_dirs(system.name, backend=backend)
    dirs = [
        d
        for d in dirs
        if d.parents[2] == dirs[0].parents[2] and (version is None or Version(d.name) <= version)
    ]
    return TableStack([TableSet(d, system) for d in dirs], dirs[0].parents[2]) if dirs else None


class PerfDB:
    # per (system, backend, version): the default tables (directory listings, files read on first query) and
    # one shared PerfDB whose answer cache every estimate of the process reuses; a handful of systems at most
    default_tables: ClassVar[BoundedCache[tuple, TableStack | None]] = BoundedCache(16)
    shared_dbs: ClassVar[BoundedCache[tuple, "PerfDB"]] = BoundedCache(8)

    def __init__(
        self,
        system: SystemSpec,
        tables: Tables | None = None,
        use_tables: bool = True,
        backend: str = DEFAULT_BACKEND,
        version: str | None = None,
        transfer: bool = True,
    ):
        """tables: an object with .lookup(key) -> OpLatency | None (servelab.perfdb.tables); by default the
        tables of this system collected with this backend up to engine release `version` (None: the newest),
        with the kernel tables, torch-to-engine ratios and other systems' tables behind them (see the module
        docstring). Tables the caller names answer alone, before the roofline."""
        self.system = system
        self.backend = backend
        self.version = Version(version) if version is not None else None
        self.roofline = Roofline(system, backend=backend)
        defaults = tables is None and use_tables
        engine = engine_of(backend) if is_engine(backend) else None
        if defaults:
            tables = self._stack(system, backend)
        self.tables = tables
        # the kernel tables, ratios and transfers come with the default tables only, not with named ones
        self.kernel_tables: list[tuple[TableStack, KernelChoice]] = []
        self.torch_tables: TableStack | None = None
        self.ratios: RatioFile | None = None
        if defaults and engine is not None:
            for choice in kernel_choices(engine):
                if choice.applies_at(self.version):
                    found = self._stack(system, choice.table)
                    if found is not None:
                        self.kernel_tables.append((found, choice))
            # the ratios fitted on the tables of the root the torch tables come from
            self.torch_tables = self._stack(system, DEFAULT_BACKEND)
            if self.torch_tables is not None and self.torch_tables.root is not None:
                self.ratios = read_ratios(backend, self.torch_tables.root / "ratios")
        # the kernel tables by the op their choice is for (a choice runs no key of another op), in order
        self._kernels_by_op: dict[str, list[tuple[TableStack, KernelChoice]]] = {}
        for stack, choice in self.kernel_tables:
            self._kernels_by_op.setdefault(choice.op, []).append((stack, choice))
        self.transfer = defaults and transfer
        self._sources: list[PerfDB] | None = None
        self._carrying: dict[str, Roofline] = {}
        self._fits: dict[tuple[str, str], TransferFit | None] = {}  # (source system, family) -> transfer fit
        self._cache: dict[OpKey, OpLatency] = {}
        # answers kept across processes, for the default tables only (a directory the caller names is not
        # among the inputs the kept answers are keyed by); made on the first key this process had not answered
        self._keeps = self.transfer  # the sources it transfers from answer only what its own file lacks
        self._store: PriceStore | None = None

    def _stack(self, system: SystemSpec, backend: str) -> TableStack | None:
        """The default tables of a backend; an engine's are chosen by its release, torch's are not."""
        version = self.version if is_engine(backend.split("-", 1)[0]) else None
        return self.default_tables.get(
            (system.name, backend, str(version)), lambda: table_stack(system, backend, version)
        )

    @classmethod
    def shared(
        cls, system: SystemSpec, backend: str = DEFAULT_BACKEND, version: str | None = None
    ) -> "PerfDB":
        """One PerfDB per system, backend and release per process, so its answer cache is reused across
        estimates."""
        return cls.shared_dbs.get(
            (system.name, backend, version), lambda: cls(system, backend=backend, version=version)
        )

    @classmethod
    def clear_shared(cls) -> None:
        """Forget the shared PerfDBs and default tables (after the table search path changed)."""
        cls.shared_dbs.clear()
        cls.default_tables.clear()
        price_cache.forget()

    def query(self, key: OpKey) -> OpLatency:
        hit = self._cache.get(key)
        if hit is None:
            hit = self._answer(key)
        return hit

    def _answer(self, key: OpKey) -> OpLatency:
        """A key this process had not answered: an earlier process's answer, else resolved (and kept)."""
        store = self.store()
        if store is not None:
            hit = store.op(key)
            if hit is not None:
                self._cache[key] = hit
                return hit
        hit = self._cache[key] = self._resolve(key)
        if store is not None:
            store.add_op(key, hit)
        return hit

    def store(self) -> PriceStore | None:
        """The prices this PerfDB keeps across processes (servelab.perfdb.price_cache), or None."""
        if self._keeps and self._store is None:
            self._keeps = False  # made once: None where the cache is off
            identity = f"{self.system.model_dump_json()}\0{self.backend}\0{self.version}\0{self.transfer}"
            self._store = store_for(identity)
        return self._store

    def _resolve(self, key: OpKey) -> OpLatency:
        cc = self.system.compute_capability
        fallback = None
        # a shape a table holds first, best evidence first; another shape's utilisation only after that
        for borrow in (False, True):
            # a roofline answer is kept only while none is (the first one found is the fallback)
            found = self.own_answer(key, cc, borrow, roofline=fallback is None)
            if found is not None and found.source != "roofline":
                return found
            fallback = fallback or found
            if not borrow and self.transfer:
                # the engine's kernels timed on a GPU of the same architecture run the same binaries
                found = self._transferred(key, siblings=True, others=False, with_ratios=False)
                if found is not None:
                    return found
            found = self._torch_scaled(key, cc, borrow)
            if found is not None:
                return found
        if self.transfer:
            # another architecture's rows of the engine's own kernels first (this architecture's answered
            # nothing above), any system's torch rows x ratio next
            for with_ratios in (False, True):
                found = self._transferred(key, siblings=with_ratios, others=True, with_ratios=with_ratios)
                if found is not None:
                    return found
        if fallback is None:
            return self.roofline.latency(key)
        # the tables' roofline is torch's; an engine's own kernels price its (MXFP4 / INT4 experts, peer
        # all-reduce), under the note that says why no table held the key
        own = self.roofline.latency(key)
        return fallback if own.us == fallback.us else own._replace(note=fallback.note)

    def own_answer(
        self, key: OpKey, compute_capability: int, borrow: bool = True, roofline: bool = True
    ) -> OpLatency | None:
        """This system's answer from the kernel tables (which never lend another shape) and its own tables
        of this backend (steps 1-2) for a GPU of `compute_capability` (the kernel an engine runs may depend on
        it), or a roofline answer whose note says why no table held the key (None instead with `roofline`
        off), or None."""
        for stack, choice in self._kernels_by_op.get(key.op, ()):
            if choice.runs(key, self.version, compute_capability):
                found = stack.lookup(key, borrow=False, roofline=False)
                if found is not None and found.source in TABLE_SOURCES:
                    return found
        return _lookup(self.tables, key, borrow, roofline) if self.tables is not None else None

    def table_answer(self, key: OpKey, compute_capability: int, with_ratios: bool = True) -> OpLatency | None:
        """This system's best answer from tables (steps 1, 2 and 4), or None."""
        for borrow in (False, True):
            found = self.own_answer(key, compute_capability, borrow, roofline=False)
            if found is not None and found.source != "roofline":
                return found
            found = self._torch_scaled(key, compute_capability, borrow) if with_ratios else None
            if found is not None:
                return found
        return None

    def _torch_scaled(self, key: OpKey, compute_capability: int, borrow: bool) -> OpLatency | None:
        """The torch tables' answer times the torch-to-engine ratio of the kernel running the key (step 4)."""
        fam = BY_OP.get(key.op)
        if self.ratios is None or self.torch_tables is None or fam is None:
            return None
        # the kernel that runs the key: one the engine picks for it, else its default
        kernel = next(
            (
                c.table
                for _, c in self._kernels_by_op.get(key.op, ())
                if c.runs(key, self.version, compute_capability)
            ),
            self.backend,
        )
        fit = self.ratios.find(kernel, fam.name)
        torch = self.torch_tables.lookup(key, borrow=borrow, roofline=False) if fit is not None else None
        if fit is None or torch is None or torch.source not in TABLE_SOURCES:
            return None
        return scaled(torch, fam.name, fit, kernel)

    def _transferred(self, key: OpKey, siblings: bool, others: bool, with_ratios: bool) -> OpLatency | None:
        """Another system's table answer, carried here (steps 3 and 5), from the first source system that has
        one, among `siblings` (systems of this GPU's compute capability) and `others`."""
        fam = BY_OP.get(key.op)
        for source in self._transfer_sources():
            sibling = source.system.compute_capability == self.system.compute_capability
            if not (siblings if sibling else others):
                continue
            found = source.table_answer(key, self.system.compute_capability, with_ratios)
            if found is None:
                continue
            return transferred(
                found,
                source.system.name,
                source.roofline.latency(key).us,
                self._carrying_roofline(source).latency(key).us,
                self._transfer_fit(source, fam.name) if fam else None,
            )
        return None

    def _transfer_fit(self, source: "PerfDB", family: str) -> TransferFit | None:
        """The fit that carries a family's answers from `source` to this system; kept per source and family
        (it was looked up again for every key carried)."""
        fit_key = (source.system.name, family)
        if fit_key in self._fits:
            return self._fits[fit_key]
        root = next(
            (t.root for t in (source.tables, source.torch_tables) if isinstance(t, TableStack) and t.root),
            None,
        )
        fit = (
            read_transfer(root / "transfer.json").find(
                source.system.name, self.system.name, self.backend, family
            )
            if root
            else None
        )
        self._fits[fit_key] = fit
        return fit

    def _carrying_roofline(self, source: "PerfDB") -> Roofline:
        """This system's roofline with the source system's efficiencies: the ratio of the two rooflines is
        then the datasheets' alone (peaks, bandwidth, SMs), not also the difference between one system's
        fitted efficiencies (launch floor included) and another's defaults."""
        roof = self._carrying.get(source.system.name)
        if roof is None:
            roof = self._carrying[source.system.name] = Roofline(
                self.system, backend=self.backend, efficiencies_of=source.roofline.eff
            )
        return roof

    def _transfer_sources(self) -> list["PerfDB"]:
        if self._sources is None:
            names = [n for n in tables_with_data() if n != self.system.name]
            specs = [load_system(n) for n in names]
            rank = {n: i for i, n in enumerate(TRANSFER_PREFERENCE)}
            specs.sort(
                key=lambda s: (
                    s.compute_capability != self.system.compute_capability,
                    rank.get(s.name, len(rank)),
                    s.name,
                )
            )
            self._sources = [
                PerfDB(
                    s,
                    backend=self.backend,
                    version=str(self.version) if self.version else None,
                    transfer=False,
                )
                for s in specs
            ]
        return self._sources


def perfdb_for(system: SystemSpec, backend: str = DEFAULT_BACKEND, version: str | None = None) -> PerfDB:
    """The process's shared PerfDB for this system, backend and engine release (PerfDB.shared)."""
    return PerfDB.shared(system, backend, version)
