"""What every engine adapter builds on: the Launch it returns and the pieces all adapters share."""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from servelab.engines.grammar import json_arg
from servelab.engines.names import Engine
from servelab.errors import ServelabError


class Launch(BaseModel):
    """What starts one server: argv (never a shell string), environment, and files written next to it."""

    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict, description="relative path -> content")
    port: int
    health_path: str = "/health"

    @field_validator("files")
    @classmethod
    def _files_stay_in_the_run_folder(cls, v: dict[str, str]) -> dict[str, str]:
        for path in v:
            check_launch_file(path)
        return v


class Role(StrEnum):
    """What one process of a deployment is."""

    PREFILL = "prefill"  # a prefill server of a disaggregated deployment
    DECODE = "decode"  # a decode server of a disaggregated deployment
    WORKER = "worker"  # an aggregated server (prefill and decode), one of several behind a router
    ROUTER = "router"  # the front the benchmark sends to (a router, a frontend, a proxy)
    SIDE = "side"  # a process the others need and the benchmark never talks to (etcd, NATS, a KV store)


# what must be up before what: a router finds its workers at start, servers find their side processes
START_ORDER = (Role.SIDE, Role.PREFILL, Role.DECODE, Role.WORKER, Role.ROUTER)
# a node's address in a deployment's argv, env and files, known only where it runs: `{{node:N}}`
NODE_PLACEHOLDER = re.compile(r"\{\{node:(\d+)\}\}")


def node_parts(text: str) -> list[str | int]:
    """`text` split into its literal pieces (str) and the nodes whose address goes between them (int)."""
    parts: list[str | int] = []
    for i, piece in enumerate(NODE_PLACEHOLDER.split(text)):
        if i % 2:
            parts.append(int(piece))
        elif piece:
            parts.append(piece)
    return parts


def with_addresses(text: str, addresses: list[str]) -> str:
    """`text` with each `{{node:N}}` replaced by addresses[N]; one line naming N when there is none."""
    out = []
    for part in node_parts(text):
        if isinstance(part, int) and part >= len(addresses):
            raise ServelabError(f"{{{{node:{part}}}}}: the deployment has {len(addresses)} node(s) here")
        out.append(addresses[part] if isinstance(part, int) else part)
    return "".join(out)


class NodeProcess(BaseModel):
    """One process of a deployment: what it runs, on which node, and how to know it is up."""

    role: Role
    node: int = Field(0, ge=0, description="index of the node it runs on, 0 first")
    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    port: int | None = Field(None, description="the port it serves on; None: no HTTP endpoint")
    health_path: str | None = Field("/health", description="GET path that answers 200 once it is up")
    gpus: int = Field(0, ge=0, description="GPUs it uses on its node")
    mpi_group: int | None = Field(
        None,
        ge=0,
        description="the MPI job it is part of: the processes of one group are its ranks on their nodes, "
        "started together by one launcher (srun --mpi=pmix), a task per GPU; None: a process of its own. In "
        "the JSON only when set",
    )

    @model_serializer(mode="wrap")
    def _set_fields_only(self, handler: SerializerFunctionWrapHandler) -> dict:
        # a job file written before MPI groups reads and fingerprints the same: the key only when set
        out = handler(self)
        if out.get("mpi_group") is None:
            out.pop("mpi_group", None)
        return out


class Deployment(BaseModel):
    """Several processes over one or more nodes that serve as one endpoint (disaggregated prefill/decode,
    replicas behind a router): what a multinode job launches in place of one server."""

    nodes: int = Field(ge=1)
    processes: list[NodeProcess] = Field(min_length=1)
    endpoint: int = Field(ge=0, description="index in processes of the one the benchmark sends to")
    files: dict[str, str] = Field(default_factory=dict, description="relative path -> content")

    @field_validator("files")
    @classmethod
    def _files_stay_in_the_run_folder(cls, v: dict[str, str]) -> dict[str, str]:
        for path in v:
            check_launch_file(path)
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Deployment:
        if self.endpoint >= len(self.processes) or self.processes[self.endpoint].port is None:
            raise ValueError(f"endpoint {self.endpoint} is not a process with a port")
        for p in self.processes:
            if p.node >= self.nodes:
                raise ValueError(f"a {p.role} process is on node {p.node}; the deployment has {self.nodes}")
        for group, members in self.mpi_groups().items():
            _check_group(group, [self.processes[i] for i in members])
        return self

    def mpi_groups(self) -> dict[int, list[int]]:
        """MPI group -> the positions in processes of its ranks' processes (one per node), in list order."""
        out: dict[int, list[int]] = {}
        for position, p in enumerate(self.processes):
            if p.mpi_group is not None:
                out.setdefault(p.mpi_group, []).append(position)
        return out

    def start_order(self) -> list[tuple[int, int]]:
        """(position in processes, index within its role) of every process, in the order they start: side
        processes first, then prefill, decode and aggregated servers, the routers last (list order within
        a role)."""
        counts: dict[Role, int] = {}
        numbered = []
        for position, p in enumerate(self.processes):
            numbered.append((position, counts.get(p.role, 0)))
            counts[p.role] = counts.get(p.role, 0) + 1
        return sorted(numbered, key=lambda t: (START_ORDER.index(self.processes[t[0]].role), t[0]))

    def at_addresses(self, addresses: list[str]) -> Deployment:
        """The deployment with `{{node:N}}` replaced by addresses[N] in every argv, env value and file."""

        def sub(text: str) -> str:
            return with_addresses(text, addresses)

        processes = [
            p.model_copy(
                update={"argv": [sub(a) for a in p.argv], "env": {k: sub(v) for k, v in p.env.items()}}
            )
            for p in self.processes
        ]
        files = {path: sub(content) for path, content in self.files.items()}
        return self.model_copy(update={"processes": processes, "files": files})


def _check_group(group: int, members: list[NodeProcess]) -> None:
    """The processes of one MPI group are one command over its nodes: one launcher starts the same argv and
    environment on each, a task per GPU, the same number of GPUs on every node, each node once, no HTTP
    port of a rank's own."""
    first = members[0]
    nodes = [p.node for p in members]
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"MPI group {group} names node {nodes[0]} twice (one process per node of a group)")
    for p in members:
        if (p.role, p.argv, p.env, p.gpus, p.port) != (
            first.role,
            first.argv,
            first.env,
            first.gpus,
            first.port,
        ):
            raise ValueError(
                f"MPI group {group}: its processes differ (one launcher starts one role, argv, env, GPU "
                "count and port on every node)"
            )
    if first.gpus < 1:
        raise ValueError(f"MPI group {group}: a rank per GPU needs the GPUs of each node (gpus >= 1)")


# a segment of a launch file's path: a plain name (no `..`, no `~`, no backslash, no control character)
_SEGMENT = re.compile(r"[A-Za-z0-9_+=@,-][A-Za-z0-9._+=@,-]*")
MAX_PATH = 1024


def check_launch_file(path: str) -> str:
    """A file a launch writes is a relative path of plain names, so it lands in the run folder (or the
    container's working directory) whatever writes it: never absolute, never `..`, `~` or a backslash."""
    segments = path.split("/")
    if len(path) > MAX_PATH or not all(_SEGMENT.fullmatch(s) for s in segments):
        raise ValueError(
            f"{path!r} is not a relative path of plain names inside the run folder "
            "(no leading /, no .. or ~, letters, digits and ._+=@,- only)"
        )
    return path


def base_env(recipe, profile_env: dict[str, str] | None = None) -> dict[str, str]:
    """Upstream's launch-profile env, then the recipe env and typed pins (CUDA_HOME) over it, sorted so the
    fingerprint is stable."""
    env = {**(profile_env or {}), **recipe.env}
    if recipe.engine.cuda_home:
        env["CUDA_HOME"] = recipe.engine.cuda_home
    return dict(sorted(env.items()))


def refuse(engine: Engine, recipe, fields: list[str]) -> None:
    """Raise for typed engine fields this engine cannot express, rather than silently dropping them."""
    dumped = recipe.engine.dump()
    bad = [f for f in fields if dumped.get(f) not in (None, [], {})]
    if bad:
        raise ServelabError(
            f"engine.{bad[0]}: not supported by the {engine} adapter (set on recipe for {engine})"
        )


__all__ = [
    "Deployment",
    "Launch",
    "NODE_PLACEHOLDER",
    "NodeProcess",
    "Role",
    "START_ORDER",
    "base_env",
    "check_launch_file",
    "json_arg",
    "node_parts",
    "refuse",
    "with_addresses",
]
