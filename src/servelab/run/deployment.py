"""A job's Deployment (recipes.engines.base: processes per role and node, one endpoint) as `servelab run`
starts it: its processes in start order (side processes first, then the servers, the router last), each
numbered within its role, and what the plan view and the run's record show of them (secrets redacted)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from servelab.errors import ServelabError
from servelab.recipes.engines import Deployment, Role
from servelab.redact import redact_argv, redact_env
from servelab.runner.deployment import DeployedProcess

SERVER_ROLES = (Role.PREFILL, Role.DECODE, Role.WORKER)
LOG_DIR = "deployment"
LOCAL = "127.0.0.1"  # node 0's address when servelab run starts a deployment on this machine


def on_this_machine(dep: Deployment) -> Deployment:
    """A deployment whose processes are all on node 0 as this machine runs it: `{{node:0}}` becomes
    127.0.0.1 in argv, env and files. One with processes on other nodes is left as it is (refused before
    anything starts: refuse_unstartable)."""
    if any(p.node > 0 for p in dep.processes):
        return dep
    return dep.at_addresses([LOCAL])


def start_order(dep: Deployment) -> tuple[tuple[DeployedProcess, ...], int]:
    """The processes in start order (Deployment.start_order), and the index in that order of the endpoint
    (the one the benchmark sends to). Env is what each sets over the caller's environment."""
    order = dep.start_order()
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
        for p, index in ((dep.processes[position], index) for position, index in order)
    )
    endpoint = next(i for i, (position, _) in enumerate(order) if position == dep.endpoint)
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
