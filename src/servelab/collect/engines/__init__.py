"""Engine kernels as a collector backend: one declarative catalogue per engine (servelab.engines.Engine).

A catalogue is a list of KernelEntry: which ops and keys an entry measures (`runs`), the models and shapes it
plans (`plan`), the engine kernel it calls (`bench`, run in the worker; `kernel` says what it is), the engine
versions it applies to, the files of the engine's wheel it needs (compiled libraries loaded with
torch.ops.load_library, Python sources whose Triton kernels are compiled without importing the engine) and
the table backend its rows go to (`backend`: perfdb/data/<system>/<backend>/<version>/). The keys are
`perfdb.keys` op keys: the ones the predictor asks for.

Modelled on AIConfigurator's collector/vllm/registry.py (op -> cases -> run function -> perf file); the
entries here are data, the kernels live in one module per engine path (engines/vllm_*.py).
"""

from collections.abc import Callable
from typing import NamedTuple

from servelab.engines import MODELLED, Engine, engine_of
from servelab.errors import ServelabError
from servelab.perfdb.keys import OpKey
from servelab.perfdb.ops import OpName
from servelab.registry import Registry


class KernelEntry(NamedTuple):
    """One engine kernel path the collector can time."""

    name: str  # the entry's id within its catalogue ("marlin_moe")
    ops: tuple[OpName, ...]  # ops whose keys it measures
    backend: str  # table backend its rows go to ("vllm-marlin")
    kernel: str  # what runs, in words (provenance and each row's `backend`)
    bench: str  # "module:function"(key) -> timing dict, run in a worker process
    runs: Callable[[OpKey], bool]  # the keys this kernel path runs (the engine's own dispatch rule)
    plan: Callable[[], list[OpKey]]  # the keys a campaign measures with it
    versions: tuple[str, str] = ("0", "9999")  # engine versions [first, past-last) it applies to
    files: tuple[str, ...] = ()  # wheel members it needs (libraries, sources; fnmatch patterns allowed)
    libraries: tuple[str, ...] = ()  # of `files`, compiled libraries loaded with torch.ops.load_library
    needs: tuple[str, ...] = ()  # Python packages that must import besides torch and triton
    stand_ins: str = ""  # what in the timed path is not the engine's own kernel, said in every row
    pending: str = ""  # why this declared entry cannot run yet (planned by --dry-run, skipped by a run)
    cost: Callable[[OpKey, object], float] | None = None  # (key, roofline) -> GPU-seconds, where the timing
    # method's own estimate (collect.estimate) does not fit (long prompts timed a chunk at a time)


class Catalogue(NamedTuple):
    engine: Engine
    distribution: str  # the package whose wheel holds the kernels (vLLM's is named as the engine)
    entries: tuple[KernelEntry, ...]

    def entry(self, name: str) -> KernelEntry:
        for e in self.entries:
            if e.name == name:
                return e
        known = ", ".join(e.name for e in self.entries)
        raise ServelabError(f"{self.engine}: no kernel entry {name!r}; entries: {known}", field="engine")

    def applicable(self, version: str | None) -> tuple[KernelEntry, ...]:
        """The entries whose version range holds `version` (all of them when the version is not known)."""
        if version is None:
            return self.entries
        return tuple(e for e in self.entries if in_range(version, e.versions))

    def for_key(self, key: OpKey, version: str | None) -> KernelEntry | None:
        """The first applicable entry that runs this key, as the engine's dispatch would pick it."""
        for e in self.applicable(version):
            if key.op in e.ops and e.runs(key):
                return e
        return None


def version_tuple(version: str) -> tuple[int, ...]:
    """'0.25.0' -> (0, 25, 0); local and pre-release parts ('+cu130', 'rc1') are dropped."""
    out = []
    for part in version.split("+")[0].split("."):
        digits = part[: len(part) - len(part.lstrip("0123456789"))]  # the leading digits ("0rc1" -> "0")
        if not digits:
            break
        out.append(int(digits))
        if len(digits) < len(part):
            break
    return tuple(out)


def in_range(version: str, bounds: tuple[str, str]) -> bool:
    v = version_tuple(version)
    return version_tuple(bounds[0]) <= v < version_tuple(bounds[1])


def _load(engine: Engine) -> Catalogue:
    """The engine's catalogue module, imported on first use (each is a list of entries and their plans)."""
    module = __import__(f"servelab.collect.engines.{engine.value}", fromlist=["CATALOGUE"])
    return module.CATALOGUE


def _loader(engine: Engine) -> Callable[[], Catalogue]:
    return lambda: _load(engine)


# engine -> its catalogue, loaded when asked for
CATALOGUES: Registry[Callable[[], Catalogue]] = Registry("engine", {e.value: _loader(e) for e in MODELLED})


def catalogue(name: str) -> Catalogue:
    """The catalogue of an engine, any spelling of its name (servelab.engines.engine_of)."""
    return CATALOGUES.get(engine_of(name, field="engine").value)()
