"""The parent side of an engine campaign: which entries and keys it plans, what it costs, what its
provenance says, and what its workers are told. One campaign directory per table backend (vllm,
vllm-marlin, ...), so each merges into its own perfdb/data/<system>/<backend>/<version>/."""

from pathlib import Path
from typing import NamedTuple

from servelab.collect import estimate
from servelab.collect.engines import Catalogue, KernelEntry, catalogue, loader, runtime
from servelab.collect.suite import resolve
from servelab.errors import ServelabError


class EngineRun(NamedTuple):
    engine: str  # servelab.engines.Engine value
    backend: str  # the table backend this campaign's rows go to
    files: Path | None = None  # folder of the engine's files (with manifest.json); None: plan only
    kernels: tuple[str, ...] = ()  # entry names to run (empty: every applicable entry)
    catalogue_path: str = ""  # "module:ATTR" of another catalogue (tests)
    device: str = runtime.GPU_DEVICE  # "module:" prefix of the device runtime (tests: the fake one)


def active(run: EngineRun) -> Catalogue:
    return resolve(run.catalogue_path) if run.catalogue_path else catalogue(run.engine)


def engine_version(run: EngineRun) -> str | None:
    return loader.read_manifest(run.files).version if run.files else None


def selected(
    cat: Catalogue, ops: set[str], version: str | None, kernels: tuple[str, ...]
) -> list[KernelEntry]:
    """Entries applicable to the version, named by `kernels` (all when empty), measuring one of `ops`."""
    for name in kernels:
        cat.entry(name)  # an unknown name fails in one line
    return [
        e
        for e in cat.applicable(version)
        if (not kernels or e.name in kernels) and any(op in ops for op in e.ops)
    ]


def backends(cat: Catalogue, ops: set[str], version: str | None, kernels: tuple[str, ...]) -> list[str]:
    found = list(dict.fromkeys(e.backend for e in selected(cat, ops, version, kernels)))
    if not found:
        raise ServelabError(
            f"{cat.engine}: no kernel entry{f' of version {version}' if version else ''} measures "
            f"{', '.join(sorted(ops))}; entries: "
            + "; ".join(f"{e.name} ({', '.join(e.ops)})" for e in cat.entries),
            field="ops",
        )
    return found


def entries(run: EngineRun, ops: set[str]) -> list[KernelEntry]:
    cat = active(run)
    return [e for e in selected(cat, ops, engine_version(run), run.kernels) if e.backend == run.backend]


def plan_keys(run: EngineRun, ops: set[str]) -> list:
    """The keys of this backend's entries, each entry's in its own order."""
    keys: dict = {}
    for e in entries(run, ops):
        for k in e.plan():
            if k.op in ops and k.op in e.ops:
                keys.setdefault(k, None)
    return list(keys)


def seconds(run: EngineRun, keys: list, roofline) -> float:
    """GPU-seconds of these keys: an entry's own estimate where it has one, else the timing method's."""
    by_op = {op: e for e in entries(run, {k.op for k in keys}) for op in e.ops}
    total = 0.0
    for k in keys:
        e = by_op.get(k.op)
        total += e.cost(k, roofline) if e is not None and e.cost else estimate.key_seconds(k, roofline)
    return total


def provenance(run: EngineRun, ops: set[str]) -> dict:
    """The engine, its version, the wheel and each file's sha256, and what every entry times."""
    found = loader.read_manifest(run.files) if run.files else None
    out: dict = {
        "engine": {
            **(found.provenance() if found else {"name": run.engine}),
            "backend": run.backend,
            "entries": {
                e.name: {"kernel": e.kernel, "stand_ins": e.stand_ins, "versions": list(e.versions)}
                for e in entries(run, ops)
            },
        }
    }
    if found:
        out[run.engine] = found.version  # as the first engine tables named it (vllm: 0.12.0)
    return out


def env(run: EngineRun) -> dict[str, str]:
    out = {
        runtime.ENV_ENGINE: run.engine,
        runtime.ENV_BACKEND: run.backend,
        runtime.ENV_DEVICE: run.device,
    }
    if run.files:
        out[runtime.ENV_FILES] = str(Path(run.files).resolve())
    if run.catalogue_path:
        out[runtime.ENV_CATALOGUE] = run.catalogue_path
    if run.kernels:
        out[runtime.ENV_KERNELS] = ",".join(run.kernels)
    return out


def files_needed(cat: Catalogue, ops: set[str], version: str | None, kernels: tuple[str, ...]) -> list[str]:
    return list(
        dict.fromkeys(f for e in selected(cat, ops, version, kernels) if not e.pending for f in e.files)
    )
