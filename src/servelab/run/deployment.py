"""A job's Deployment (recipes.engines.base: processes per role and node, one endpoint) as `servelab run`
starts it: its processes in start order (side processes first, then the servers, the router last), each
numbered within its role, and what the plan view and the run's record show of them (secrets redacted)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from servelab.errors import ServelabError
from servelab.recipes.engines import Deployment, NodeProcess, Role
from servelab.redact import redact_argv, redact_env
from servelab.runner.deployment import DeployedProcess

# what must be up before what: a router finds its workers at start, servers find their side processes
START_ORDER = (Role.SIDE, Role.PREFILL, Role.DECODE, Role.WORKER, Role.ROUTER)
SERVER_ROLES = (Role.PREFILL, Role.DECODE, Role.WORKER)
LOG_DIR = "deployment"


def _numbered(dep: Deployment) -> list[tuple[NodeProcess, int, int]]:
    """(process, index within its role, position in the deployment's list) for every process."""
    counts: dict[Role, int] = {}
    out = []
    for position, p in enumerate(dep.processes):
        out.append((p, counts.get(p.role, 0), position))
        counts[p.role] = counts.get(p.role, 0) + 1
    return out


def start_order(dep: Deployment) -> tuple[tuple[DeployedProcess, ...], int]:
    """The processes in start order, and the index in that order of the endpoint (the one the benchmark
    sends to). Env is what each sets over the caller's environment."""
    numbered = sorted(_numbered(dep), key=lambda t: (START_ORDER.index(t[0].role), t[2]))
    procs = tuple(
        DeployedProcess(
            role=str(p.role),
            index=index,
            argv=list(p.argv),
            env=dict(p.env),
            port=p.port,
            health_path=p.health_path,
            node=p.node,
            gpus=p.gpus,
        )
        for p, index, _ in numbered
    )
    endpoint = next(i for i, (_, _, position) in enumerate(numbered) if position == dep.endpoint)
    return procs, endpoint


def engine_process(procs: tuple[DeployedProcess, ...]) -> DeployedProcess:
    """The first server (prefill, decode or worker) of the deployment, else its first process: the one whose
    argv says which engine and model it serves (a router's does not)."""
    return next((p for p in procs if p.role in SERVER_ROLES), procs[0])


def with_environment(procs: tuple[DeployedProcess, ...]) -> list[DeployedProcess]:
    """The processes as started here: each one's env set over this process's environment."""
    return [replace(p, env=dict(os.environ) | (p.env or {})) for p in procs]


def refuse_unstartable(procs: tuple[DeployedProcess, ...], docker: bool) -> None:
    """servelab run starts every process on this machine, each as a process of its own: a process of another
    node (a multinode job needs srun or ssh per node: `servelab sweep --format slurm`) or --docker is refused
    before anything starts."""
    if docker:
        raise ServelabError(
            "--docker: a deployment's processes start on this host (a container per process is not there "
            "yet)",
            field="docker",
        )
    away = [p for p in procs if p.node > 0]
    if away:
        raise ServelabError(
            f"{away[0].name} runs on node {away[0].node}: servelab run starts a deployment's processes on "
            "this machine only (run a multinode job through `servelab sweep --format slurm`)",
            field="job",
        )


def public(procs: tuple[DeployedProcess, ...]) -> list[dict]:
    """The processes as the plan view and the run's record show them: argv and env with secrets redacted."""
    return [
        {
            "role": p.role,
            "index": p.index,
            "node": p.node,
            "argv": redact_argv(p.argv),
            "env": redact_env(p.env or {}),
            "port": p.port,
            "health_path": p.health_path,
            "gpus": p.gpus,
            "log": f"{LOG_DIR}/{p.log_name}",
        }
        for p in procs
    ]


RECORD_FILE = "deployment.json"


def record_deployment(run_dir: Path, procs: tuple[DeployedProcess, ...]) -> None:
    """The deployment's processes (secrets redacted) in the run folder, beside the one server argv the store
    keeps; written when the run begins, so a run that fails to start still says what it tried."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RECORD_FILE).write_text(json.dumps({"processes": public(procs)}, indent=1) + "\n")
