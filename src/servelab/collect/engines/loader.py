"""An engine's kernels without the engine: the files of its wheel a catalogue entry needs, found, checked
and loaded.

The files come from the wheel itself (a .whl path: the members are extracted into a folder beside it) or
from a folder made earlier from one (`extract`), which holds them at their paths inside the wheel plus
manifest.json: the engine, its version, the wheel's file name and sha256 and each file's sha256. Every file is
checked against the manifest before it is used, and the campaign's provenance records the same hashes.
Compiled libraries load with torch.ops.load_library (vLLM's are built against torch's ABI of their release:
vLLM 0.25 pins torch 2.11); Python sources are read as text by the kernels that compile their Triton kernels.
Anything that cannot be found, checked or loaded is refused in one line.
"""

import ctypes
import fnmatch
import hashlib
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from servelab.errors import ServelabError

MANIFEST = "manifest.json"


class EngineFiles(NamedTuple):
    root: Path  # the folder holding the files at their wheel paths
    engine: str
    version: str
    wheel: str  # the wheel's file name
    wheel_sha256: str
    files: dict[str, str]  # wheel path -> sha256

    def path(self, member: str) -> Path:
        if member not in self.files:
            raise ServelabError(
                f"{self.root}: {member} is not among the extracted files (extract it from the wheel again "
                "with the entries that need it)",
                field="engine_files",
            )
        return self.root / member

    def provenance(self) -> dict:
        return {
            "name": self.engine,
            "version": self.version,
            "wheel": self.wheel,
            "wheel_sha256": self.wheel_sha256,
            "files_sha256": dict(sorted(self.files.items())),
        }


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def wheel_version(wheel: Path) -> tuple[str, str]:
    """(distribution, version) from a wheel's file name (name-version-...-platform.whl)."""
    parts = wheel.name.split("-")
    if not wheel.name.endswith(".whl") or len(parts) < 3:
        raise ServelabError(
            f"{wheel}: not a wheel file name (name-version-...-platform.whl)", field="engine_files"
        )
    return parts[0].lower().replace("_", "-"), parts[1]


def expand(members: list[str], names) -> tuple[list[str], list[str]]:
    """(the names `members` stand for, the members that match none); a member with * ? or [ is an fnmatch
    pattern (the tuned config files of a kernel, say)."""
    names = sorted(names)
    found: dict[str, None] = {}
    missing = []
    for m in members:
        hits = (
            [n for n in names if fnmatch.fnmatchcase(n, m)]
            if any(c in m for c in "*?[")
            else [m] * (m in names)
        )
        if not hits:
            missing.append(m)
        found.update(dict.fromkeys(hits))
    return list(found), missing


def extract(wheel: Path, members: list[str], to: Path, engine: str) -> EngineFiles:
    """Copy `members` of the wheel into `to` (at their wheel paths) and write the manifest."""
    wheel = Path(wheel)
    if not wheel.is_file():
        raise ServelabError(f"{wheel}: no such wheel file", field="engine_files")
    _, version = wheel_version(wheel)
    to = Path(to)
    files: dict[str, str] = {}
    try:
        with zipfile.ZipFile(wheel) as z:
            wanted, missing = expand(members, z.namelist())
            if missing:
                raise ServelabError(
                    f"{wheel.name}: has no {', '.join(missing[:3])}"
                    f"{' (and more)' if len(missing) > 3 else ''}: not a wheel these entries know",
                    field="engine_files",
                )
            for m in wanted:
                target = to / m
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(m))
                files[m] = sha256(target)
    except zipfile.BadZipFile:
        raise ServelabError(f"{wheel}: not a zip archive (a wheel is one)", field="engine_files") from None
    found = EngineFiles(to, engine, version, wheel.name, sha256(wheel), files)
    _write_manifest(found)
    return found


def _write_manifest(found: EngineFiles) -> None:
    data = {
        "engine": found.engine,
        "version": found.version,
        "wheel": found.wheel,
        "wheel_sha256": found.wheel_sha256,
        "files": dict(sorted(found.files.items())),
    }
    (found.root / MANIFEST).write_text(json.dumps(data, indent=1) + "\n")


def open_files(path: Path, members: list[str], engine: str) -> EngineFiles:
    """The engine files at `path` (a folder with a manifest, or a wheel to extract beside itself), each
    member checked against the manifest's sha256."""
    path = Path(path)
    if path.is_file():
        folder = path.with_name(path.name.removesuffix(".whl") + ".files")
        if (folder / MANIFEST).is_file():
            have = read_manifest(folder)
            if have.wheel_sha256 == sha256(path) and not expand(members, have.files)[1]:
                return verify(have, members)
        return extract(path, sorted(set(members) | set(_previous(folder))), folder, engine)
    if not path.is_dir():
        raise ServelabError(f"{path}: no such wheel or folder of engine files", field="engine_files")
    found = read_manifest(path)
    if found.engine != engine:
        raise ServelabError(f"{path}: files of {found.engine}, not {engine}", field="engine_files")
    return verify(found, members)


def _previous(folder: Path) -> list[str]:
    try:
        return list(read_manifest(folder).files)
    except ServelabError:
        return []


def read_manifest(folder: Path) -> EngineFiles:
    manifest = Path(folder) / MANIFEST
    if not manifest.is_file():
        raise ServelabError(
            f"{folder}: no {MANIFEST} (make the folder with `servelab collect --engine ... --engine-files "
            "WHEEL --extract-to DIR --dry-run`)",
            field="engine_files",
        )
    try:
        data = json.loads(manifest.read_text())
        return EngineFiles(
            Path(folder), data["engine"], data["version"], data["wheel"], data["wheel_sha256"], data["files"]
        )
    except (ValueError, KeyError, TypeError) as e:
        raise ServelabError(
            f"{manifest}: not a manifest of engine files ({e})", field="engine_files"
        ) from None


def verify(found: EngineFiles, members: list[str]) -> EngineFiles:
    """Every member (or every file a pattern stands for) present with the manifest's sha256."""
    names, missing = expand(members, found.files)
    if missing:
        raise ServelabError(
            f"{found.root}: {missing[0]} is not among the extracted files (extract it from the wheel "
            "again with the entries that need it)",
            field="engine_files",
        )
    for m in names:
        path = found.path(m)
        if not path.is_file():
            raise ServelabError(f"{path}: missing (the manifest lists it)", field="engine_files")
        got = sha256(path)
        if got != found.files[m]:
            raise ServelabError(
                f"{path}: sha256 {got[:16]}... differs from the manifest's {found.files[m][:16]}...",
                field="engine_files",
            )
    return found


def load_library(found: EngineFiles, member: str, load: Callable[[str], None] | None = None) -> str:
    """Load one compiled library of the engine into this process (torch.ops.load_library); its sha256.

    Where the loader misses libcudart of the CUDA the library was built for, the one that torch's CUDA
    runtime wheel installs is preloaded and the load tried once more."""
    verify(found, [member])
    path = found.path(member)
    load = load or _torch_load
    try:
        load(str(path))
    except OSError as first:
        cudart = _find_cudart()
        if cudart is None:
            raise ServelabError(
                f"{path.name}: cannot load ({_first_line(first)})", field="engine_files"
            ) from None
        try:
            ctypes.CDLL(str(cudart), mode=ctypes.RTLD_GLOBAL)
            load(str(path))
        except OSError as again:
            raise ServelabError(
                f"{path.name}: cannot load ({_first_line(again)}) even after preloading {cudart.name}",
                field="engine_files",
            ) from None
    return found.files[member]


def _torch_load(path: str) -> None:
    try:
        import torch  # noqa: PLC0415 - torch is an optional extra (the core install has none)
    except ImportError:
        raise ServelabError(
            "loading an engine library needs torch (pip install '.[collect]')", field="engine_files"
        ) from None
    torch.ops.load_library(path)


def _find_cudart() -> Path | None:
    """libcudart.so.13 (or .12) of the nvidia CUDA runtime wheel beside torch, if installed."""
    try:
        import torch  # noqa: PLC0415 - torch is an optional extra (the core install has none)
    except ImportError:
        return None
    site = Path(torch.__file__).resolve().parents[1]
    found = sorted(site.glob("nvidia/**/libcudart.so.1[23]*"), reverse=True)
    return found[0] if found else None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]
