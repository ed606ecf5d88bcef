"""PerfDB: answers op latency queries for one system and backend, from perf tables where they have data and
from the roofline elsewhere. Answers are cached: the same key asked twice costs a dict lookup.

A backend is priced from tables collected with that backend only. The shipped H200 torch tables time torch's
kernels (cuBLAS, SDPA, servelab's reference MoE / MLA / DeepSeek-V4 kernels), not the engines' (CUTLASS,
FlashMLA, fused MoE, custom all-reduce): priced from them, engine TPOT was off by 35.6 % (median, leave one
model out, 525 measured H200 rows), against 24.1 % from the roofline (docs/accuracy.md, section 4). An
engine's own tables answer only the ops they hold (the shipped vllm table: its block-FP8 fused-MoE kernel);
every other op of that engine is priced by its roofline, as without tables.

Where an engine picks its kernel by shape or expert dtype, each other kernel's tables sit under a backend
directory of their own (KERNEL_TABLES) and answer first the keys that kernel runs, where they hold the shape
(measured, or between or beyond collected token counts; not borrowed from another shape); the engine's tables
answer the rest."""

from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import ClassVar, Generic, Protocol, TypeVar

from servelab.perfdb.keys import Moe, OpKey
from servelab.perfdb.latency import OpLatency
from servelab.perfdb.roofline import Roofline
from servelab.perfdb.tables import TableSet, load_default_tables
from servelab.specs import SystemSpec

# a kernel table's answers taken; a borrowed one (another shape's utilisation) or its roofline is not
KERNEL_TABLE_SOURCES = ("measured", "interpolated", "extrapolated")


def vllm_runs_deepgemm(key: OpKey) -> bool:
    """vLLM 0.12 with DeepGEMM installed (its docker images install it) runs block-FP8 (128 x 128) experts
    through DeepGemmExperts wherever both GEMMs' N and K are multiples of 128, at every token count: its
    VLLM_USE_DEEP_GEMM_E8M0 default skips the M >= 128 and N > 512 checks (fp8.py, fused_moe.py,
    deep_gemm_moe.py of vLLM 0.12.0). It turns DeepGEMM off by default at TP >= 8, which the key cannot see;
    Qwen3-235B's TP8 width (192) fails the multiple-of-128 rule anyway."""
    if not isinstance(key, Moe):
        return False
    return key.dtype == "fp8_block" and key.hidden % 128 == 0 and key.inter % 128 == 0


def vllm_runs_marlin(key: OpKey) -> bool:
    """vLLM on Hopper runs MXFP4 experts (gpt-oss) through its Marlin W4A16 kernel when
    VLLM_MXFP4_USE_MARLIN=1, which InferenceX's vLLM gpt-oss recipes for H100 and H200 set from vLLM 0.13 on
    (InferenceX 4e52ed4c6, "Fix H100/H200 perf regression"), and before vLLM vendored triton_kernels whenever
    that package was absent (mxfp4.py `get_mxfp4_backend`, vLLM 0.10.2 and 0.18.0); vLLM 0.12+ defaults to
    triton_kernels otherwise. Only Hopper has this table: other systems keep the roofline (Blackwell runs
    FlashInfer's MXFP4 kernels)."""
    return isinstance(key, Moe) and key.dtype == "mxfp4"


# engine backend -> the kernels it picks by shape or dtype: (their backend directory, which keys run them)
KERNEL_TABLES: dict[str, tuple[tuple[str, Callable[[OpKey], bool]], ...]] = {
    "vllm": (("vllm-deepgemm", vllm_runs_deepgemm), ("vllm-marlin", vllm_runs_marlin)),
}

K = TypeVar("K")
V = TypeVar("V")


class Tables(Protocol):
    def lookup(self, key: OpKey) -> OpLatency | None: ...


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


class PerfDB:
    # per (system, backend): the default tables (a directory listing, files read on first query) and one
    # shared PerfDB whose answer cache every estimate of the process reuses; a handful of systems at most
    default_tables: ClassVar[BoundedCache[tuple[str, str], TableSet | None]] = BoundedCache(8)
    shared_dbs: ClassVar[BoundedCache[tuple[str, str], "PerfDB"]] = BoundedCache(8)

    def __init__(
        self,
        system: SystemSpec,
        tables: Tables | None = None,
        use_tables: bool = True,
        backend: str = "torch",
    ):
        """tables: an object with .lookup(key) -> OpLatency | None (servelab.perfdb.tables); by default the
        tables collected for this system with this backend, if any."""
        self.system = system
        self.roofline = Roofline(system, backend=backend)
        defaults = tables is None and use_tables
        if defaults:
            tables = self.default_tables.get(
                (system.name, backend), lambda: load_default_tables(system, backend)
            )
        self.tables = tables
        # the kernel tables come with the engine's default tables only, not with tables the caller names
        self.kernel_tables: list[tuple[Tables, Callable[[OpKey], bool]]] = []
        for kernel_backend, runs in KERNEL_TABLES.get(backend, ()) if defaults else ():
            found = self.default_tables.get(
                (system.name, kernel_backend), partial(load_default_tables, system, kernel_backend)
            )
            if found is not None:
                self.kernel_tables.append((found, runs))
        self._cache: dict[OpKey, OpLatency] = {}

    @classmethod
    def shared(cls, system: SystemSpec, backend: str = "torch") -> "PerfDB":
        """One PerfDB per system and backend per process, so its answer cache is reused across estimates."""
        return cls.shared_dbs.get((system.name, backend), lambda: cls(system, backend=backend))

    @classmethod
    def clear_shared(cls) -> None:
        """Forget the shared PerfDBs and default tables (after the table search path changed)."""
        cls.shared_dbs.clear()
        cls.default_tables.clear()

    def query(self, key: OpKey) -> OpLatency:
        hit = self._cache.get(key)
        if hit is None:
            hit = self._resolve(key)
            self._cache[key] = hit
        return hit

    def _resolve(self, key: OpKey) -> OpLatency:
        for kernel_tables, runs in self.kernel_tables:
            if runs(key):
                found = kernel_tables.lookup(key)
                if found is not None and found.source in KERNEL_TABLE_SOURCES:
                    return found
        if self.tables is not None:
            found = self.tables.lookup(key)
            if found is not None:
                return found
        return self.roofline.latency(key)


def perfdb_for(system: SystemSpec, backend: str = "torch") -> PerfDB:
    """The process's shared PerfDB for this system and backend (PerfDB.shared)."""
    return PerfDB.shared(system, backend)
