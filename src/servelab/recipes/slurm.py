"""SLURM batch scripts for a sweep: its single-node jobs as array jobs (task N runs job N), a multinode
deployment as one sbatch script that starts each of its processes on its node with srun.

Each array task runs its job exactly as the `sh` format's script does (pipelines.job_lines), under srun, in a
folder of its own (the tasks share the submit directory, and each writes servelab-job.json and results/).
Directive values are checked when the options are read and shell-quoted where they are written: sbatch reads
`#SBATCH` lines with shell-like quoting, and bash reads them as comments, so only a line break could turn a
value into a command, and none gets through.
"""

from __future__ import annotations

import re
import shlex

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servelab.errors import ServelabError
from servelab.recipes.pipelines import (
    DEFAULT_LAUNCHER,
    job_comments,
    job_file_lines,
    job_lines,
    script_names,
)
from servelab.recipes.tokens import EnvName, Text, check_text

# SLURM's default MaxArraySize is 1001 (task ids 0-1000); a larger sweep is split into several arrays, which
# also keeps each script well under its default 4 MB batch-script limit (a job is about 3 KB of script).
MAX_ARRAY_TASKS = 1000
ARRAY_LOGS = "%x-%A_%a"  # job name, array job id, task id
JOB_LOGS = "%x-%j"
SRUN_ONE = ["srun", "--nodes=1", "--ntasks=1"]

_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
# SLURM's time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or no limit.
_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|(?i:unlimited|infinite)")
_SBATCH_ARG = re.compile(r"--[a-z][a-z0-9-]*(=.*)?", re.DOTALL)
# directives servelab writes itself, so a second one would silently override (or break the task mapping)
_OWN = ("array", "nodes", "ntasks", "ntasks-per-node", "job-name", "output", "error")


class SlurmOptions(BaseModel):
    """Where and how long the jobs run: `servelab sweep --format slurm` takes its options from these."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: str | None = Field(
        None, description="slurm: partition (comma list allowed); the cluster's default when not given."
    )
    account: str | None = Field(None, description="slurm: account; the user's default when not given.")
    time: str = Field("3:00:00", description="slurm: time limit per job (MM, HH:MM:SS, D-HH:MM, ...).")
    sbatch_arg: list[str] = Field(
        default_factory=list,
        description="slurm: one more #SBATCH directive as --name=value, e.g. --qos=high (repeatable).",
    )

    @field_validator("partition")
    @classmethod
    def _partition(cls, v: str | None) -> str | None:
        if v is not None and not all(_NAME.fullmatch(p) for p in v.split(",")):
            raise ValueError(f"{v!r} is not a partition name or comma list (letters, digits, _ . + -)")
        return v

    @field_validator("account")
    @classmethod
    def _account(cls, v: str | None) -> str | None:
        if v is not None and not _NAME.fullmatch(v):
            raise ValueError(f"{v!r} is not an account name (letters, digits, _ . + -)")
        return v

    @field_validator("time")
    @classmethod
    def _time(cls, v: str) -> str:
        if not _TIME.fullmatch(v):
            raise ValueError(f"{v!r} is not a SLURM time limit (MM, HH:MM:SS, D-HH:MM, unlimited)")
        return v

    @field_validator("sbatch_arg")
    @classmethod
    def _sbatch_args(cls, v: list[str]) -> list[str]:
        for arg in v:
            check_text(arg)
            m = _SBATCH_ARG.fullmatch(arg)
            if not m:
                raise ValueError(f"{arg!r} is not an sbatch option as --name or --name=value")
            name = arg[2:].split("=", 1)[0]
            if name in _OWN + ("partition", "account", "time"):
                raise ValueError(
                    f"{arg!r}: servelab writes --{name} itself (see --partition, --account, --time)"
                )
        return v

    def directives(self) -> list[str]:
        """The #SBATCH lines every script shares (after its own)."""
        args = [f"--time={self.time}"]
        args += [f"--partition={self.partition}"] if self.partition else []
        args += [f"--account={self.account}"] if self.account else []
        return [f"#SBATCH {shlex.quote(a)}" for a in args + self.sbatch_arg]


class NodeProcess(BaseModel):
    """One process of a multinode deployment: the node of the allocation it runs on (0-based), its argv and
    its environment (set with `env NAME=value`, so argv[0] may not start with - or hold =)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node: int = Field(ge=0)
    argv: list[Text] = Field(min_length=1)
    env: dict[EnvName, Text] = Field(default_factory=dict)

    @field_validator("argv")
    @classmethod
    def _program(cls, v: list[str]) -> list[str]:
        if v[0].startswith("-") or "=" in v[0]:
            raise ValueError(f"{v[0]!r} is not a program (it would read as an option or a NAME=value)")
        return v


def job_gpus(job) -> int:
    """GPUs one single-node job uses (a row's tp counts attention data-parallel ranks too)."""
    r = job.point
    return (r.tp or 1) * (r.pp or 1) * int(job.row.get("pcp-size") or 1)


def _header(name: str, own: list[str], opts: SlurmOptions, logs: str) -> list[str]:
    lines = ["#!/usr/bin/env bash", f"#SBATCH --job-name={shlex.quote(name)}"]
    lines += [f"#SBATCH {a}" for a in own] + opts.directives()
    return lines + [f"#SBATCH --output={logs}.out", f"#SBATCH --error={logs}.err"]


def array_script(jobs, names: list[str], opts: SlurmOptions, launcher: str = DEFAULT_LAUNCHER) -> str:
    """One array job for single-node jobs: task N makes the folder names[N], writes job N's file there and
    runs its `servelab run --job` under srun, as the sh format's script for that job does."""
    last = len(jobs) - 1
    own = [f"--array=0-{last}", "--nodes=1", "--ntasks=1", f"--gpus-per-node={max(map(job_gpus, jobs))}"]
    lines = _header("servelab-sweep", [*own, "--exclusive"], opts, ARRAY_LOGS)
    lines += [
        f"# servelab sweep: {len(jobs)} single-node jobs, array task N runs job N",
        "set -euo pipefail",
        'case "${SLURM_ARRAY_TASK_ID:?set by sbatch for each task of an array job}" in',
    ]
    for i, (job, name) in enumerate(zip(jobs, names, strict=True)):
        folder = shlex.quote(name)
        lines += [f"{i})", *job_comments(job), f"mkdir -p -- {folder}", f"cd -- {folder}"]
        lines += job_lines(job, launcher, SRUN_ONE) + [";;"]
    lines += [f'*) echo "servelab: no job for array task $SLURM_ARRAY_TASK_ID (0-{last})" >&2; exit 2 ;;']
    return "\n".join(lines + ["esac"]) + "\n"


def multinode_script(
    job,
    name: str,
    processes: list[NodeProcess],
    gpus_per_node: int,
    opts: SlurmOptions,
) -> str:
    """One sbatch script for a multinode deployment: each process but the last started on its node with
    srun in the background, the last (the one that benchmarks) in the foreground; the others are stopped
    when it ends, whichever way. The job file is written first, as the sh format writes it. Nothing calls
    this yet: a multinode job gets its per-node processes from the deployment launches (issue 32)."""
    if not processes:
        raise ServelabError(f"{job.label()}: a multinode script needs at least one process")
    nodes = max(p.node for p in processes) + 1
    own = [f"--nodes={nodes}", "--ntasks-per-node=1", f"--gpus-per-node={gpus_per_node}", "--exclusive"]
    lines = _header(f"servelab-{job.key}", own, opts, JOB_LOGS)
    folder = shlex.quote(name)
    lines += [*job_comments(job), "set -euo pipefail", f"mkdir -p -- {folder}", f"cd -- {folder}"]
    lines += job_file_lines(job)
    if len(processes) > 1:
        lines += ["steps=()", """trap 'kill "${steps[@]}" 2>/dev/null || true' EXIT"""]
    for i, p in enumerate(processes):
        env = ["env", *(f"{k}={v}" for k, v in p.env.items())] if p.env else []
        argv = shlex.join([*SRUN_ONE, f"--relative={p.node}", *env, *p.argv])
        lines += [argv] if i == len(processes) - 1 else [f"{argv} &", "steps+=($!)"]
    return "\n".join(lines) + "\n"


def slurm_scripts(jobs, opts: SlurmOptions, launcher: str = DEFAULT_LAUNCHER) -> dict[str, str]:
    """File name -> script: the single-node jobs as array jobs of at most MAX_ARRAY_TASKS tasks
    (array.sbatch, or array-1.sbatch, array-2.sbatch, ...). A multinode job has no per-node launch yet, so it
    is refused as the sh format refuses a job without a launch."""
    for j in jobs:
        if j.unrunnable is not None or j.point.multinode:
            why = j.unrunnable or "a multinode job has no per-node launch yet"
            raise ServelabError(f"{j.label()}: no script can be written: {why}")
    names = [n.removesuffix(".sh") for n in script_names(jobs)]
    parts = [range(i, min(i + MAX_ARRAY_TASKS, len(jobs))) for i in range(0, len(jobs), MAX_ARRAY_TASKS)]
    out = {}
    for n, part in enumerate(parts, 1):
        file = "array.sbatch" if len(parts) == 1 else f"array-{n}.sbatch"
        out[file] = array_script([jobs[i] for i in part], [names[i] for i in part], opts, launcher)
    return out
