"""What a worker process does for an engine campaign: load the engine's libraries once, then time each key
with the catalogue entry that runs it. The campaign tells its workers what to run through the environment
(spawned processes and Ray tasks inherit it): the engine, the folder of its files, the table backend of this
campaign, the device runtime (the GPU's, or the fake one in tests) and, in tests, another catalogue."""

import os
from pathlib import Path

from servelab.collect.engines import Catalogue, KernelEntry, catalogue, loader
from servelab.collect.suite import OpSuite, resolve
from servelab.errors import ServelabError

ENV_ENGINE = "SERVELAB_ENGINE"
ENV_FILES = "SERVELAB_ENGINE_FILES"
ENV_BACKEND = "SERVELAB_ENGINE_BACKEND"
ENV_DEVICE = (
    "SERVELAB_ENGINE_DEVICE"  # "module:" prefix of init_worker / facts (servelab.collect.ops.runtime:)
)
ENV_CATALOGUE = "SERVELAB_ENGINE_CATALOGUE"  # "module:ATTR" of a Catalogue, instead of the engine's own
ENV_KERNELS = "SERVELAB_ENGINE_KERNELS"  # the entries --kernels named, comma separated (absent: all)
GPU_DEVICE = "servelab.collect.ops.runtime:"

_state: dict = {}


class Unsupported(Exception):
    """This entry cannot run here (pending, or a package it needs is missing): the key's answer."""


def active_catalogue() -> Catalogue:
    path = os.environ.get(ENV_CATALOGUE)
    return resolve(path) if path else catalogue(os.environ[ENV_ENGINE])


def files() -> loader.EngineFiles | None:
    folder = os.environ.get(ENV_FILES)
    return loader.read_manifest(Path(folder)) if folder else None


def campaign_entries() -> list[KernelEntry]:
    """The entries of this campaign's backend that --kernels named (all when it named none)."""
    backend = os.environ[ENV_BACKEND]
    named = [n for n in os.environ.get(ENV_KERNELS, "").split(",") if n]
    return [e for e in active_catalogue().entries if e.backend == backend and (not named or e.name in named)]


def entry_for(key) -> KernelEntry:
    """The entry of this campaign that runs `key` (one backend's entries of an op split its keys by their
    `runs`, as vLLM's fused-MoE Triton kernel has one entry for block-FP8 experts and one for bf16)."""
    backend = os.environ[ENV_BACKEND]
    for e in campaign_entries():
        if key.op in e.ops and e.runs(key):
            return e
    raise ServelabError(f"no {os.environ.get(ENV_ENGINE)} entry writes this {key.op} key's rows to {backend}")


def init_worker(device_index: int) -> None:
    """The device first, then every library of this campaign's entries (a library that cannot load stops
    the worker, and with it the run, in one line)."""
    resolve(os.environ.get(ENV_DEVICE, GPU_DEVICE) + "init_worker")(device_index)
    found = files()
    loaded = {}
    for e in campaign_entries():
        if e.pending:
            continue
        if e.files and found is None:
            raise ServelabError(f"{e.name} needs the engine's files ({', '.join(e.files)}): --engine-files")
        if found is not None and e.files:
            loader.verify(found, list(e.files))
        for lib in e.libraries:
            if lib not in loaded and found is not None:
                loaded[lib] = loader.load_library(found, lib)
    _state.update(files=found, loaded=loaded)


def _importable(package: str) -> bool:
    try:
        __import__(package)
    except ImportError:
        return False
    return True


def bench(key) -> dict:
    e = entry_for(key)
    if e.pending:
        raise Unsupported(f"{e.name}: {e.pending}")
    missing = [p for p in e.needs if not _importable(p)]
    if missing:
        raise Unsupported(f"{e.name} needs {', '.join(missing)}, which does not import here")
    result = resolve(e.bench)(key, _state.get("files"))
    found = _state.get("files")
    return {
        **result,
        "backend": result.get("backend", e.kernel[:120]),
        "kernel_entry": e.name,
        "engine_version": found.version if found else None,
        **({"stand_ins": e.stand_ins} if e.stand_ins else {}),
    }


def pending(key, found=None) -> dict:
    raise Unsupported("this entry is declared, not implemented")


def facts() -> dict:
    out = resolve(os.environ.get(ENV_DEVICE, GPU_DEVICE) + "facts")()
    out["engine_libraries_loaded"] = dict(_state.get("loaded", {}))
    return out


def classify(exc: BaseException) -> str:
    if isinstance(exc, Unsupported):
        return "unsupported"
    return resolve(os.environ.get(ENV_DEVICE, GPU_DEVICE) + "classify")(exc)


def after_error() -> None:
    resolve(os.environ.get(ENV_DEVICE, GPU_DEVICE) + "after_error")()


def suite(ops, device: str = GPU_DEVICE) -> OpSuite:
    """The worker functions of an engine campaign (collectives are not engine kernels: the GPU runtime's
    stand in for the unused comm slots)."""
    p = "servelab.collect.engines.runtime:"
    return OpSuite(
        bench={op: p + "bench" for op in ops},
        worker_init=p + "init_worker",
        comm_init=device + "init_comm",
        comm_close=device + "close_comm",
        barrier=device + "barrier",
        classify=p + "classify",
        after_error=p + "after_error",
        facts=p + "facts",
        name="engine",
    )
