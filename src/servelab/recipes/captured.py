"""What the deployments rendered from a capture of upstream's multinode scripts share (tilert.py, llmd.py):
node addresses written back as `{{node:N}}`, and a stored profile (processes, files) made a Deployment."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

from servelab.recipes.engines.base import Deployment, NodeProcess, Role


def placeholder(node_ips: list[str]):
    """A function that writes each of `node_ips` (the capture's addresses, node 0 first) in a value as
    `{{node:N}}`."""
    pattern = re.compile(r"(?<![\d.])(" + "|".join(map(re.escape, node_ips)) + r")(?![\d])")

    def write(value: str) -> str:
        return pattern.sub(lambda m: f"{{{{node:{node_ips.index(m.group(1))}}}}}", value)

    return write


def deployment_from(profile: dict) -> Deployment:
    """The Deployment a stored profile describes: its processes (the router the endpoint) and files."""
    processes = [NodeProcess.model_validate(p) for p in profile["processes"]]
    endpoint = next(i for i, p in enumerate(processes) if p.role == Role.ROUTER)
    return Deployment(
        nodes=profile["nodes"], processes=processes, endpoint=endpoint, files=profile.get("files", {})
    )


@cache
def _profiles(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def captured_deployment(path: Path, framework: str, job: str) -> tuple[Deployment | None, str | None]:
    """(deployment, why not) of a job from the stored profiles at `path` (by the job's id)."""
    profile = _profiles(path).get(job)
    if profile is None:
        return None, f"{framework}: servelab has no capture of upstream's scripts for {job}"
    return deployment_from(profile), None
