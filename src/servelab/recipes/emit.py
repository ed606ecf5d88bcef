"""Write a list of jobs in one output format: a file (json, github, buildkite), or scripts (sh: one per job;
slurm: array jobs; k8s: one manifest per deployment) on stdout when there is one, else in a directory."""

from __future__ import annotations

import sys
from pathlib import Path

from servelab.errors import ServelabError
from servelab.recipes.k8s import k8s_manifests
from servelab.recipes.pipelines import (
    DEFAULT_LAUNCHER,
    LAUNCHERS,
    script,
    script_names,
    to_buildkite,
    to_github,
    to_json,
)
from servelab.recipes.slurm import SlurmOptions, slurm_scripts

FORMATS = ("json", "github", "buildkite", "sh", "slurm", "k8s")
_SCRIPTS = {"sh": "one script per job", "slurm": "sbatch scripts", "k8s": "Kubernetes manifests"}


def emit(
    jobs, fmt: str, out=None, launcher: str = DEFAULT_LAUNCHER, slurm: SlurmOptions | None = None
) -> str:
    """Jobs in `fmt`; scripts (sh, slurm) go under the directory `out` and are listed, or to stdout when
    there is one and no `out`."""
    if fmt not in FORMATS:
        raise ServelabError(f"output format {fmt!r}: expected {', '.join(FORMATS)}")
    if launcher not in LAUNCHERS:
        raise ServelabError(f"launcher {launcher!r}: expected {' or '.join(LAUNCHERS)}")
    if fmt == "sh":
        if out is None and len(jobs) != 1:
            raise ServelabError(f"sh scripts: {len(jobs)} jobs need an output directory (one script per job)")
        scripts = {n: script(j, launcher) for n, j in zip(script_names(jobs), jobs, strict=True)}
        return _scripts(scripts, fmt, out)
    if fmt == "slurm":
        return _scripts(slurm_scripts(jobs, slurm or SlurmOptions(), launcher), fmt, out)
    if fmt == "k8s":
        manifests, notes = k8s_manifests(jobs)
        for line in notes:
            print(f"note: {line}", file=sys.stderr)
        if not manifests:
            raise ServelabError(f"none of the {len(jobs)} jobs has a deployment that maps to Kubernetes")
        if out is None and len(manifests) != 1:
            raise ServelabError(
                f"k8s: {len(manifests)} manifests (one per job) need an output directory (--out)"
            )
        return _scripts(manifests, fmt, out, executable=False)
    if fmt == "json":
        text = to_json(jobs)
    elif fmt == "github":
        text = to_github(jobs, launcher)
    else:
        text = to_buildkite(jobs, launcher)
    if out is None:
        return text
    _write(Path(out), text)
    return f"wrote {len(jobs)} jobs to {out}\n"


def _scripts(scripts: dict[str, str], fmt: str, out, executable: bool = True) -> str:
    """The one script on stdout, or every script written (executable) under the directory `out`, listed."""
    if out is None:
        if len(scripts) != 1:
            raise ServelabError(f"{fmt} scripts: {len(scripts)} scripts need an output directory")
        return next(iter(scripts.values()))
    if Path(out).exists() and not Path(out).is_dir():
        raise ServelabError(f"{out}: not a directory ({fmt} output is {_SCRIPTS[fmt]} in a directory)")
    paths = {Path(out) / name: text for name, text in scripts.items()}
    for path, text in paths.items():
        _write(path, text, executable=executable)
    return "".join(f"{p}\n" for p in paths)


def _write(path: Path, text: str, executable: bool = False) -> None:
    """Write one output file (creating its directory); one line naming the path when that fails."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if executable:
            path.chmod(0o755)
    except OSError as e:
        raise ServelabError(f"{path}: cannot write ({e.strerror or e})") from None
