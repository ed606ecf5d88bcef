"""SLURM batch scripts for a sweep: its single-node jobs as array jobs (task N runs job N), a job with a
deployment as one sbatch script that starts each of its processes on its node with srun.

Each array task runs its job exactly as the `sh` format's script does (pipelines.job_lines), under srun, in a
folder of its own (the tasks share the submit directory, and each writes servelab-job.json and results/).
Directive values are checked when the options are read and shell-quoted where they are written: sbatch reads
`#SBATCH` lines with shell-like quoting, and bash reads them as comments, so only a line break could turn a
value into a command, and none gets through. A deployment's values (argv, env, files) are quoted piece by
piece, each `{{node:N}}` between them becoming `"${nodes[N]}"`: node N's name as scontrol lists the
allocation, checked to be a host name before anything starts. The ranks of an MPI group (TensorRT-LLM's
workers: a process per node, `mpi_group` set) start as one srun over their nodes, a task per GPU under
`--mpi=pmix`, as srtctl starts a TensorRT-LLM endpoint.
"""

from __future__ import annotations

import re
import shlex

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servelab.engines.names import Engine
from servelab.errors import ServelabError
from servelab.recipes.engines.base import Role, node_parts
from servelab.recipes.pipelines import (
    DEFAULT_LAUNCHER,
    job_comments,
    job_file_lines,
    job_lines,
    run_argv,
    script_names,
    trace_lines,
)
from servelab.recipes.tokens import check_text

# SLURM's default MaxArraySize is 1001 (task ids 0-1000); a larger sweep is split into several arrays, which
# also keeps each script well under its default 4 MB batch-script limit (a job is about 3 KB of script).
MAX_ARRAY_TASKS = 1000
ARRAY_LOGS = "%x-%A_%a"  # job name, array job id, task id
JOB_LOGS = "%x-%j"
SRUN_ONE = ["srun", "--nodes=1", "--ntasks=1"]
# a deployment's processes: their logs in the job's folder (as `servelab run` names them), the endpoint's
# health waited for as long as `servelab run --server-timeout` waits by default
LOG_DIR = "deployment"
HEALTH_TIMEOUT_S = 3600
HEALTH_POLL_S = 5
# TensorRT-LLM's launcher: its workers are MPI ranks (srtctl starts one srun of a task per GPU per endpoint)
MPI_LAUNCHER = f"{Engine.TRTLLM}-llmapi-launch"
# an MPI group's srun as srtctl's for a TensorRT-LLM endpoint (its backend's SrunConfig): PMIx wires the MPI
# world, tasks may share CPUs, none is bound to one; the tasks per node said too (the job's own
# --ntasks-per-node is srun's default otherwise)
MPI_SRUN = ["--mpi=pmix", "--oversubscribe", "--cpu-bind=verbose,none"]
# srtctl starts Dynamo's own frontend under PMIx too (one task; "needed in later versions of Dynamo", its
# source says): every dynamo.frontend its orchestrator started in the capture (tests/data/srtslurm) was
DYNAMO_FRONTEND = ("-m", "dynamo.frontend")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOST = "^[A-Za-z0-9._-]+$"  # what a node name from scontrol may be before it reaches an argv or a file

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


def deployment_refusal(job) -> str | None:
    """Why a job's deployment gets no script (None: it gets one)."""
    dep = job.deployment
    if any(MPI_LAUNCHER in p.argv and p.mpi_group is None for p in dep.processes):
        return (
            "its TensorRT-LLM workers start as one MPI srun per endpoint (a task per GPU, --mpi=pmix, across "
            "the endpoint's nodes), and a process of them names no mpi_group"
        )
    return None


def _srun(dep, members: list[int]) -> list[str]:
    """srun and its options for one process (`members`: its position), or for the ranks of an MPI group
    (the positions of its processes, one per node): K nodes, a task per GPU on each."""
    procs = [dep.processes[i] for i in members]
    nodelist = "--nodelist=" + ",".join(f'"${{nodes[{p.node}]}}"' for p in procs)
    if procs[0].mpi_group is None:
        return [*SRUN_ONE, "--overlap", *_frontend_mpi(procs[0].argv), nodelist]
    k, g = len(procs), procs[0].gpus
    tasks = [f"--nodes={k}", f"--ntasks={k * g}", f"--ntasks-per-node={g}"]
    return ["srun", *tasks, "--overlap", *MPI_SRUN, nodelist]


def _frontend_mpi(argv: list[str]) -> list[str]:
    runs = any(tuple(argv[i : i + 2]) == DYNAMO_FRONTEND for i in range(len(argv) - 1))
    return [MPI_SRUN[0]] if runs else []


def tasks_per_node(dep) -> int:
    """The most tasks one srun of the deployment starts on a node: a rank per GPU in an MPI group, else 1
    (srtctl's own job script asks for as many per node for TensorRT-LLM)."""
    return max((p.gpus for p in dep.processes if p.mpi_group is not None), default=1)


def _checked(job) -> None:
    """Every value that reaches a deployment script: argv and env values free of control characters (files:
    of all but newline and tab), env names as the shell names variables, no program read as an option or a
    NAME=value by srun and env, each `{{node:N}}` a node of the deployment."""
    dep = job.deployment
    where = f"{job.label()}: deployment"
    try:
        for i, p in enumerate(dep.processes):
            check_text(p.argv, f"processes[{i}].argv")
            check_text(p.env, f"processes[{i}].env")
            bad = next((k for k in p.env if not _ENV.fullmatch(k)), None)
            if bad is not None:
                raise ValueError(f"processes[{i}].env: {bad!r} is not an environment variable name")
            if p.argv[0].startswith("-") or "=" in p.argv[0]:
                raise ValueError(f"processes[{i}].argv: {p.argv[0]!r} would read as an option or NAME=value")
        for path, content in dep.files.items():
            check_text(content.replace("\n", " ").replace("\t", " "), f"files[{path}]")
    except ValueError as e:
        raise ServelabError(f"{where}.{e}") from None
    texts = [a for p in dep.processes for a in [*p.argv, *p.env.values()]] + list(dep.files.values())
    far = max((n for t in texts for n in node_parts(t) if isinstance(n, int)), default=-1)
    if far >= dep.nodes:
        raise ServelabError(f"{where}: names {{{{node:{far}}}}}; it has {dep.nodes} node(s)")


def _word(text: str) -> str:
    """One shell word for `text`: its literal pieces quoted, each `{{node:N}}` node N's name at run time."""
    parts = node_parts(text)
    return "".join(f'"${{nodes[{p}]}}"' if isinstance(p, int) else shlex.quote(p) for p in parts) or "''"


def _wait_function() -> str:
    """wait_healthy URL WHAT: poll URL until it answers 200; exit 1 in one line naming the process when a
    started one has ended first, or when the deadline passes."""
    return f"""wait_healthy() {{  # URL WHAT: poll URL until it answers 200
  local deadline=$((SECONDS + {HEALTH_TIMEOUT_S})) i
  until curl -sf -o /dev/null --max-time 10 "$1"; do
    for i in "${{!steps[@]}}"; do
      kill -0 "${{steps[i]}}" 2>/dev/null || {{
        echo "servelab: ${{names[i]}} ended before $2 was healthy (its log: {LOG_DIR}/${{names[i]}}.log)" >&2
        exit 1
      }}
    done
    ((SECONDS < deadline)) || {{
      echo "servelab: $2 did not answer $1 within {HEALTH_TIMEOUT_S} s" >&2
      exit 1
    }}
    sleep {HEALTH_POLL_S}
  done
}}"""


_STOP_FUNCTION = """stop() {  # every process started, on every exit path
  if ((${#steps[@]})); then
    kill "${steps[@]}" 2>/dev/null || true
    wait "${steps[@]}" 2>/dev/null || true
  fi
}"""


def multinode_script(job, name: str, opts: SlurmOptions, launcher: str = DEFAULT_LAUNCHER) -> str:
    """One sbatch script for a job's deployment: the job file and the deployment's files written in the
    folder `name`, the allocation's node names read into `nodes` (each `{{node:N}}` becomes node N's), each
    process started on its node with srun in the background (side processes first, their health waited
    for; an MPI group's ranks by one srun over their nodes, its log numbered as one process), then the
    endpoint's health waited for and the job's `servelab run` attached to it; every process is stopped when
    the script ends, whichever way."""
    dep = job.deployment
    if dep is None:
        raise ServelabError(f"{job.label()}: a multinode script needs the job's deployment")
    why = job.unrunnable or deployment_refusal(job)
    if why is not None:
        raise ServelabError(f"{job.label()}: no script can be written: {why}")
    _checked(job)
    if launcher != DEFAULT_LAUNCHER:
        raise ServelabError(
            f"{job.label()}: launcher {launcher!r}: a deployment's processes start on the nodes themselves "
            "(a container per process is not there yet)"
        )
    per_node = [sum(p.gpus for p in dep.processes if p.node == n) for n in range(dep.nodes)]
    own = [f"--nodes={dep.nodes}", f"--ntasks-per-node={tasks_per_node(dep)}"]
    own += [f"--gpus-per-node={max(per_node)}"] if max(per_node) else []
    lines = _header(f"servelab-{job.key}", [*own, "--exclusive"], opts, JOB_LOGS)
    folder = shlex.quote(name)
    lines += [*job_comments(job), "set -euo pipefail", f"mkdir -p -- {folder} {folder}/{LOG_DIR}"]
    lines += [f"cd -- {folder}", *trace_lines(job), *job_file_lines(job)]
    lines += [
        "# the allocation's nodes: nodes[N] is the deployment's node N",
        'hosts=$(scontrol show hostnames "${SLURM_JOB_NODELIST:?set by sbatch}")',
        'mapfile -t nodes <<< "$hosts"',
        f"if ((${{#nodes[@]}} < {dep.nodes})); then",
        f'  echo "servelab: the deployment needs {dep.nodes} nodes, the allocation has ${{#nodes[@]}}" >&2',
        "  exit 2",
        "fi",
        'for node in "${nodes[@]}"; do',
        f"  [[ $node =~ {_HOST} ]] || {{",
        '    echo "servelab: node name ${node@Q} is not a host name" >&2',
        "    exit 2",
        "  }",
        "done",
    ]
    for path, content in dep.files.items():
        if "/" in path:
            lines.append(f"mkdir -p -- {shlex.quote(path.rsplit('/', 1)[0])}")
        lines.append(f"printf '%s' {_word(content)} > {shlex.quote(path)}")
    lines += ["steps=() names=()", _STOP_FUNCTION, "trap stop EXIT", _wait_function()]
    order = dep.start_order()
    groups = dep.mpi_groups()
    started: dict[Role, int] = {}  # sruns per role so far: a log's number (an MPI group counts once)
    sides_up = False
    for position, _ in order:
        p = dep.processes[position]
        members = [position] if p.mpi_group is None else groups[p.mpi_group]
        if members[0] != position:  # a rank its group's srun (at the group's first process) started
            continue
        if p.role != Role.SIDE and not sides_up:
            sides_up = True
            lines += _side_waits(dep)
        index = started[p.role] = started.get(p.role, -1) + 1
        log = f"{p.role}-{index}"
        env = ["env", *(_word(f"{k}={v}") for k, v in p.env.items())] if p.env else []
        cmd = " ".join([*_srun(dep, members), *env, *map(_word, p.argv)])
        lines += [f"{cmd} < /dev/null > {LOG_DIR}/{log}.log 2>&1 &", f"steps+=($!) names+=({log})"]
    if not sides_up:
        lines += _side_waits(dep)
    front = dep.processes[dep.endpoint]
    url = f'"http://${{nodes[{front.node}]}}:{front.port}"'
    lines += [f"endpoint={url}", f'wait_healthy "$endpoint"{shlex.quote(front.health_path or "/")} endpoint']
    lines.append(shlex.join(run_argv(job)) + ' --base-url "$endpoint"')
    return "\n".join(lines) + "\n"


def _side_waits(dep) -> list[str]:
    """Wait for the side processes that answer HTTP (etcd's /health) before any server starts."""
    out = []
    for position, index in dep.start_order():
        p = dep.processes[position]
        if p.role == Role.SIDE and p.port is not None and p.health_path:
            url = f'"http://${{nodes[{p.node}]}}:{p.port}"{shlex.quote(p.health_path)}'
            out.append(f"wait_healthy {url} {p.role}-{index}")
    return out


def slurm_scripts(jobs, opts: SlurmOptions, launcher: str = DEFAULT_LAUNCHER) -> dict[str, str]:
    """File name -> script: the single-node jobs as array jobs of at most MAX_ARRAY_TASKS tasks
    (array.sbatch, or array-1.sbatch, array-2.sbatch, ...). A multinode job has no per-node launch yet, so it
    is refused as the sh format refuses a job without a launch."""
    for j in jobs:
        if j.unrunnable is not None or (j.point.multinode and j.deployment is None):
            why = j.unrunnable or "a multinode job has no deployment to launch"
            raise ServelabError(f"{j.label()}: no script can be written: {why}")
    names = [n.removesuffix(".sh") for n in script_names(jobs)]
    out = {
        f"{name}.sbatch": multinode_script(j, name, opts, launcher)
        for j, name in zip(jobs, names, strict=True)
        if j.deployment is not None
    }
    single = [i for i, j in enumerate(jobs) if j.deployment is None]
    parts = [single[i : i + MAX_ARRAY_TASKS] for i in range(0, len(single), MAX_ARRAY_TASKS)]
    for n, part in enumerate(parts, 1):
        file = "array.sbatch" if len(parts) == 1 else f"array-{n}.sbatch"
        out[file] = array_script([jobs[i] for i in part], [names[i] for i in part], opts, launcher)
    return out
