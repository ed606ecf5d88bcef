"""Kubernetes manifests for a job's Deployment (issue #32): `servelab sweep --format k8s`.

A Deployment names its processes per node, and node addresses as `{{node:N}}`. On Kubernetes there are no
nodes to name, only pods and Services, so each process becomes an object and each placeholder the address of
the object that plays that node's part:
- a worker pool (prefill, decode, aggregated) is a LeaderWorkerSet: one group per worker, one pod per node
  of that worker (the leader runs the worker's first-node argv, the other pods its next-node argv); the
  worker's own first node is `$(LWS_LEADER_ADDRESS)`, its own other nodes the pod's IP, and `--node-rank R`
  the pod's LWS_WORKER_INDEX (R is the pod's index in its group);
- a side process (NATS, etcd, Mooncake's master) or a router (the frontend, nginx in front of several) is a
  Deployment and a Service of the same name; `{{node:N}}:PORT` where such a process serves PORT on node N is
  that Service (a side process serves its own port and those its argv names with a `--...-port` flag);
- `{{node:N}}:PORT` of another worker's leader is that leader pod's DNS name (`<pool>-<group>.<pool>`);
- the endpoint's Service is `<base>-frontend`, on its group's leader pod when the endpoint is a worker;
- srtctl's HEAD_NODE_IP (the head node, where it starts the frontend) is the endpoint's Service;
- `files` are a ConfigMap, each file mounted under /logs (an emptyDir, so processes can still write their
  logs and configs there).
Literal `$` is written `$$`: kubelet expands `$(NAME)` in command, args and env values, and `$$` is its
escape. A deployment that does not map this way is refused with one line saying why (`Refused`).
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from servelab.engines.argv import parse
from servelab.recipes.engines.base import Deployment, NodeProcess, Role
from servelab.recipes.pipelines import script_name
from servelab.recipes.slurm import MPI_LAUNCHER
from servelab.recipes.yamlio import safe_dump_all

LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_LABELS = "leaderworkerset.sigs.k8s.io"  # the labels LWS puts on its pods
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
POD_IP = "SERVELAB_POD_IP"  # the pod's own IP, from the downward API
HEAD_ENV = "HEAD_NODE_IP"  # srtctl's head node: where it starts the frontend
LOGS = "/logs"
GPU = "nvidia.com/gpu"
WORKER_ROLES = (Role.PREFILL, Role.DECODE, Role.WORKER)

_DP_RANK = {"--data-parallel-rank", "--data-parallel-start-rank"}
_PLACEHOLDER = re.compile(r"\{\{node:(\d+)\}\}(:\d+)?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")  # what kubectl and every shell accept
_CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_MAX_BASE = 40  # leaves room for "-prefill-<group>-<index>" in a 63-character pod name


def dns_name(text: str) -> str:
    """A Kubernetes object name: lowercase letters, digits and '-', at most 63 characters (from_plan's
    manifests use it too)."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:63].rstrip("-")


class Refused(Exception):
    """A deployment that does not map cleanly onto Kubernetes objects; the message says why, in one line."""


@dataclass(frozen=True)
class _Where:
    """Where a string sits, to resolve its placeholders: the worker's first node and this pod's node (None
    outside a worker), the env name it is the value of, and what to call it in a refusal."""

    what: str
    leader: int | None = None
    node: int | None = None
    env: str | None = None


@dataclass
class _Addresses:
    services: dict[tuple[int, str], str]  # (node, ":port") -> Service:port of the process serving it
    endpoint: str  # the endpoint's Service
    leaders: dict[tuple[int, str], str]  # (node, ":port") -> pod address:port of the worker leader serving it

    def resolve(self, text: str, where: _Where, *, expand: bool = True) -> str:
        """`text` with each `{{node:N}}` replaced (see the module docstring), `$` escaped when kubelet
        expands it (`expand`)."""
        out, last = [], 0
        for m in _PLACEHOLDER.finditer(text):
            literal = text[last : m.start()]
            out += [literal.replace("$", "$$") if expand else literal, self._one(m, where, expand)]
            last = m.end()
        tail = text[last:]
        return "".join(out) + (tail.replace("$", "$$") if expand else tail)

    def _one(self, m: re.Match[str], where: _Where, expand: bool) -> str:
        n, port = int(m.group(1)), m.group(2) or ""
        if port and (n, port) in self.services:
            return self.services[n, port]
        if where.env == HEAD_ENV and m.group(0) == m.string:
            return self.endpoint
        if expand and where.leader is not None and n == where.leader:
            return LEADER_ADDRESS + port
        if expand and where.node is not None and n == where.node:
            return f"$({POD_IP}){port}"
        if port and (n, port) in self.leaders:  # another worker's leader, by its pod's DNS name
            return self.leaders[n, port]
        raise Refused(
            f"{m.group(0)} in {where.what}: node {n}'s address is neither a Service nor this worker's own pod"
        )


@dataclass
class _Pool:
    role: Role
    name: str
    groups: list[list[NodeProcess]]  # one per worker, its processes in node order


def base_name(job) -> str:
    """The objects' common prefix: the job's key and fingerprint, as a DNS label that starts with a letter."""
    head = dns_name(job.key)[: _MAX_BASE - 9].rstrip("-") or "job"
    name = f"{head}-{dns_name(job.fingerprint.rsplit(':', 1)[-1])[:8]}"
    return name if name[0].isalpha() else f"j{name}"[:_MAX_BASE]


def _pools(job, dep: Deployment, base: str) -> list[_Pool]:
    """The worker processes cut into workers: a pool's processes are its workers' in turn, as many per worker
    as the row's worker count leaves (a prefill or decode pool), else as its `--nnodes` says, else as name
    the first's `--data-parallel-address`."""
    point = job.point
    pools = []
    for role in WORKER_ROLES:
        procs = [p for p in dep.processes if p.role == role]
        if not procs:
            continue
        row = point.prefill if role == Role.PREFILL else point.decode if role == Role.DECODE else None
        if row is not None and row.num_worker:
            if len(procs) % row.num_worker:
                raise Refused(f"{len(procs)} {role} processes for {row.num_worker} workers")
            size = len(procs) // row.num_worker
        elif _flag(procs[0].argv, "--nnodes"):
            size = int(_flag(procs[0].argv, "--nnodes") or 1)
        else:  # the processes of one data-parallel worker name one address, its first's
            address = _flag(procs[0].argv, "--data-parallel-address")
            size = (
                sum(1 for p in procs if address and _flag(p.argv, "--data-parallel-address") == address) or 1
            )
        groups = [procs[i : i + size] for i in range(0, len(procs), size)]
        for g in groups:
            if len(g) != size or len({p.node for p in g}) != size:
                raise Refused(f"a {role} worker's processes are not one per node of {size} nodes")
        pools.append(_Pool(role, f"{base}-{role}", groups))
    return pools


def _flag(argv: list[str], name: str) -> str | None:
    return next((a.value for a in parse(argv) if a.name == name), None)


def _side_names(dep: Deployment, base: str) -> tuple[dict[int, str], str]:
    """Each side or router process's object name (routers with the same argv, env and port: one name, as
    replicas of one Deployment) and the endpoint's."""
    names: dict[int, str] = {}
    seen: dict[tuple, str] = {}
    if dep.processes[dep.endpoint].role in WORKER_ROLES:  # the name of the Service in front of it
        seen[()] = f"{base}-frontend"
    # the endpoint first, so it is the one named <base>-frontend
    for i in sorted(range(len(dep.processes)), key=lambda i: i != dep.endpoint):
        p = dep.processes[i]
        if p.role in WORKER_ROLES:
            continue
        if p.port is None:
            raise Refused(f"a {p.role} process ({p.argv[0]}) serves no port, so no Service can reach it")
        key = (p.role, tuple(p.argv), tuple(sorted(p.env.items())), p.port)
        if key not in seen:
            stem = "frontend"  # the endpoint, and routers behind it
            if p.role == Role.SIDE:
                stem = dns_name(posixpath.basename(p.argv[0]))[:15].rstrip("-") or "side"
            name = f"{base}-{stem}"
            if name in seen.values():
                name = f"{name}-{p.port}"
            if name in seen.values():
                raise Refused(f"two {p.role} processes on port {p.port} differ in argv or env")
            seen[key] = name
        names[i] = seen[key]
    return dict(sorted(names.items())), names.get(dep.endpoint, f"{base}-frontend")


def manifest(job) -> list[dict[str, Any]]:
    """The Kubernetes objects of a job's deployment (raises Refused when it does not map cleanly)."""
    dep: Deployment = job.deployment
    if any(MPI_LAUNCHER in p.argv for p in dep.processes):
        raise Refused(
            f"its TensorRT-LLM workers start as MPI ranks, a task per GPU under srun --mpi=pmix "
            f"({MPI_LAUNCHER}), and the deployment names one process per node: a pod would start one rank"
        )
    _refuse_data_parallel(dep)
    base = base_name(job)
    image = job.row["image"]
    names, endpoint = _side_names(dep, base)
    services = {
        (dep.processes[i].node, f":{port}"): f"{name}:{port}"
        for i, name in names.items()
        for port in _ports(dep.processes[i])
    }
    pools = _pools(job, dep, base)
    leaders = {}
    for pool in pools:
        port = pool.groups[0][0].port  # every group's leader serves its template's
        for g, group in enumerate(pool.groups):
            if group[0].port is not None and port is not None:
                leaders[group[0].node, f":{group[0].port}"] = f"{pool.name}-{g}.{pool.name}:{port}"
    addresses = _Addresses(services, endpoint, leaders)
    files = _files(dep, base, addresses)
    docs: list[dict[str, Any]] = [files] if files else []
    for pool in pools:
        docs.append(_leader_worker_set(pool, image, addresses, base, bool(files), dep.files))
    if dep.endpoint not in names:
        docs.append(_leader_service(dep, pools, endpoint, base))
    done: set[str] = set()
    for i, name in names.items():
        if name in done:
            continue
        done.add(name)
        p = dep.processes[i]
        replicas = sum(1 for n in names.values() if n == name)
        container = _container(p, _Where(f"{name}'s {{}}"), image, addresses, dep.files)
        docs += _deployment(name, base, replicas, container, bool(files)), _service(name, base, p)
    return docs


def _refuse_data_parallel(dep: Deployment) -> None:
    """vLLM's data-parallel mode starts a process per rank (--data-parallel-rank): ranks sharing a node
    would be containers of one pod. (One rank group per node, --data-parallel-start-rank, maps as any
    multinode worker: the leader's and the others' templates; more than two nodes numbered apart are
    refused where the pool's pods are compared.)"""
    ranks: dict[tuple[Role, int], int] = Counter()
    for p in dep.processes:
        ranks[p.role, p.node] += any(arg.name in _DP_RANK for arg in parse(p.argv))
    for (role, node), n in ranks.items():
        if n > 1:
            raise Refused(
                f"its {role} workers run in vLLM's data-parallel mode, {n} processes on node {node} (one per "
                "rank) sharing its address: they would be containers of one pod, not written yet"
            )


def _ports(p: NodeProcess) -> list[int]:
    """The ports a process serves: its own, and for a side process every port its argv names with a
    `--...-port` flag (mooncake_master's metadata and metrics servers)."""
    ports = [] if p.port is None else [p.port]
    if p.role == Role.SIDE:
        for arg in parse(p.argv):
            if arg.name and arg.name.endswith("port") and arg.value and arg.value.isdigit():
                ports += [] if int(arg.value) in ports else [int(arg.value)]
    return ports


def _leader_service(dep: Deployment, pools: list[_Pool], name: str, base: str) -> dict[str, Any]:
    """The endpoint's Service when the endpoint is a worker: in front of its group's leader pod."""
    p = dep.processes[dep.endpoint]
    for pool in pools:
        for g, group in enumerate(pool.groups):
            if group[0] is p:
                selector = {f"{LWS_LABELS}/name": pool.name, f"{LWS_LABELS}/group-index": str(g)}
                selector[f"{LWS_LABELS}/worker-index"] = "0"
                port = {"name": "main", "port": p.port, "targetPort": pool.groups[0][0].port}
                return _object("v1", "Service", name, base) | {
                    "spec": {"selector": selector, "ports": [port]}
                }
    raise Refused(f"the endpoint ({p.argv[0]} on node {p.node}) is a worker's process but not its leader")


def _files(dep: Deployment, base: str, addresses: _Addresses) -> dict[str, Any] | None:
    if not dep.files:
        return None
    data = {}
    for path, text in dep.files.items():
        data[_key(path)] = addresses.resolve(text, _Where(f"file {path}"), expand=False)
    return _object("v1", "ConfigMap", f"{base}-files", base) | {"data": data}


def _key(path: str) -> str:
    """A file's ConfigMap key: its path with `/` as `--` (a key holds no `/`)."""
    key = path.replace("/", "--")
    if not _CONFIGMAP_KEY.fullmatch(key) or len(key) > 253:
        raise Refused(f"file {path!r}: not a ConfigMap key ([-._a-zA-Z0-9], at most 253 characters)")
    return key


def _object(api: str, kind: str, name: str, base: str) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "labels": {"app": base}}}


def _env(p: NodeProcess, where: _Where, addresses: _Addresses, pod_ip: bool) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = []
    if pod_ip:
        env.append({"name": POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    for name, value in p.env.items():
        if not _ENV_NAME.fullmatch(name):
            raise Refused(f"env name {name!r}: not a name a container's environment takes")
        if name == "CUDA_VISIBLE_DEVICES" and len(value.split(",")) == p.gpus:
            continue  # the pod is given exactly its GPUs (the limit below), numbered from 0
        sub = _Where(where.what.format(f"env {name}"), where.leader, where.node, name)
        env.append({"name": name, "value": addresses.resolve(value, sub)})
    return env


def _argv(p: NodeProcess, where: _Where, addresses: _Addresses, rank: int | None) -> list[str]:
    out: list[str] = []
    for arg in parse(p.argv):
        tokens = list(arg.tokens)
        if arg.name == "--node-rank" and rank is not None and arg.value == str(rank) and len(tokens) == 2:
            tokens[1] = WORKER_INDEX  # the pod's index in its group is the worker's node rank
        elif arg.name == "--device-ids" and arg.value != ",".join(map(str, range(p.gpus))):
            raise Refused(f"--device-ids {arg.value}: a pod's {p.gpus} GPUs are numbered from 0")
        else:
            tokens = [
                addresses.resolve(t, _Where(where.what.format("argv"), where.leader, where.node))
                for t in tokens
            ]
        out += tokens
    return out


def _container(
    p: NodeProcess,
    where: _Where,
    image: str,
    addresses: _Addresses,
    files: dict[str, str],
    rank: int | None = None,
) -> dict[str, Any]:
    argv = _argv(p, where, addresses, rank)
    env = _env(p, where, addresses, pod_ip=any(f"$({POD_IP})" in v for v in argv) or _uses_pod_ip(p, where))
    c: dict[str, Any] = {"name": "main", "image": image, "command": argv[:1], "args": argv[1:], "env": env}
    if p.port is not None:
        c["ports"] = [{"name": "main", "containerPort": p.port}]
        c["ports"] += [{"name": f"p{port}", "containerPort": port} for port in _ports(p)[1:]]
        probe = (
            {"httpGet": {"path": p.health_path, "port": "main"}}
            if p.health_path
            else {"tcpSocket": {"port": "main"}}
        )
        c["readinessProbe"] = {
            **probe,
            "periodSeconds": 10,
            "failureThreshold": 360,
        }  # loading can take an hour
    if p.gpus:
        c["resources"] = {"limits": {GPU: p.gpus}, "requests": {GPU: p.gpus}}
    mounts = [{"name": "logs", "mountPath": LOGS}, {"name": "shm", "mountPath": "/dev/shm"}]
    mounts += [{"name": "files", "mountPath": f"{LOGS}/{path}", "subPath": _key(path)} for path in files]
    c["volumeMounts"] = mounts
    return c


def _uses_pod_ip(p: NodeProcess, where: _Where) -> bool:
    """Whether an env value names the pod's own node (so SERVELAB_POD_IP must come before it)."""
    if where.node is None or where.node == where.leader:
        return False
    own = f"{{{{node:{where.node}}}}}"
    return any(own in v for v in p.env.values())


def _pod_spec(container: dict[str, Any], base: str, has_files: bool) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [
        {"name": "logs", "emptyDir": {}},
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
    ]
    if has_files:
        volumes.append({"name": "files", "configMap": {"name": f"{base}-files"}})
    return {"containers": [container], "volumes": volumes}


def _template(name: str, base: str, container: dict[str, Any], has_files: bool) -> dict[str, Any]:
    labels = {"app": base, "servelab/part": name}
    return {"metadata": {"labels": labels}, "spec": _pod_spec(container, base, has_files)}


def _deployment(
    name: str, base: str, replicas: int, container: dict[str, Any], has_files: bool
) -> dict[str, Any]:
    return _object("apps/v1", "Deployment", name, base) | {
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": base, "servelab/part": name}},
            "template": _template(name, base, container, has_files),
        }
    }


def _service(name: str, base: str, p: NodeProcess) -> dict[str, Any]:
    return _object("v1", "Service", name, base) | {
        "spec": {
            "selector": {"app": base, "servelab/part": name},
            "ports": [{"name": "main", "port": p.port, "targetPort": "main"}]
            + [{"name": f"p{port}", "port": port, "targetPort": f"p{port}"} for port in _ports(p)[1:]],
        }
    }


def _leader_worker_set(
    pool: _Pool, image: str, addresses: _Addresses, base: str, has_files: bool, files: dict[str, str]
) -> dict[str, Any]:
    """One LeaderWorkerSet for a pool: every worker must be the first's, pod for pod, once mapped."""
    size = len(pool.groups[0])
    per_rank = []
    for rank in range(size):
        seen = []
        for g, group in enumerate(pool.groups):
            p = group[rank]
            where = _Where(f"{pool.name} worker {g} node {rank}'s {{}}", group[0].node, p.node)
            seen.append(_container(p, where, image, addresses, files, rank))
        per_rank.append(seen)
    for rank, seen in enumerate(per_rank):
        want = per_rank[min(rank, 1)][0]
        for g, c in enumerate(seen):
            diff = _difference(c, want)
            if diff:
                raise Refused(f"{pool.name} worker {g} node {rank}: {diff} differs from the pool's template")
    spec: dict[str, Any] = {
        "size": size,
        "leaderTemplate": _template(pool.name, base, per_rank[0][0], has_files),
    }
    if size > 1:
        spec["workerTemplate"] = _template(pool.name, base, per_rank[1][0], has_files)
    else:
        spec["workerTemplate"] = spec.pop("leaderTemplate")
    return _object(LWS_API, "LeaderWorkerSet", pool.name, base) | {
        "spec": {"replicas": len(pool.groups), "leaderWorkerTemplate": spec}
    }


# values srtctl staggers only so that processes sharing a host do not collide; each pod has a network
# namespace of its own, so every pod of a pool may take its template's
_PER_HOST_ENV = ("DYN_SYSTEM_PORT",)
_PER_HOST_FLAGS = ("--port", "--disaggregation-bootstrap-port", "--nccl-port")


def _difference(c: dict[str, Any], want: dict[str, Any]) -> str | None:
    """The first argv token or env variable in which container `c` differs from `want` beyond per-host
    ports; None when they match."""
    a, b = _comparable(c), _comparable(want)
    if a["env"] != b["env"]:
        return next(
            f"env {k}"
            for k in sorted(a["env"].keys() | b["env"].keys())
            if a["env"].get(k) != b["env"].get(k)
        )
    if a["argv"] != b["argv"]:
        pairs = zip(a["argv"], b["argv"], strict=False)
        at = next((i for i, (x, y) in enumerate(pairs) if x != y), None)
        if at is None:
            return "its argv's length"
        after = f" after {a['argv'][at - 1]}" if at else ""
        return f"argv {a['argv'][at]!r}{after} (the template's: {b['argv'][at]!r})"
    if a["rest"] != b["rest"]:
        return "its GPUs, port or mounts"
    return None


def _comparable(c: dict[str, Any]) -> dict[str, Any]:
    env = {e["name"]: e.get("value") for e in c["env"] if e["name"] not in _PER_HOST_ENV}
    argv: list[str] = []
    for arg in parse(c["command"] + c["args"]):
        argv += [arg.name or "", "*"] if arg.name in _PER_HOST_FLAGS else list(arg.tokens)
    rest = {k: v for k, v in c.items() if k not in ("env", "command", "args", "ports", "readinessProbe")}
    return {"env": env, "argv": argv, "rest": rest}


def k8s_manifests(jobs) -> tuple[dict[str, str], list[str]]:
    """File name -> multi-document YAML for each job with a deployment, and one note per job left out
    (no deployment, or one that does not map: why). A file is named as the job's sh script, with the
    fingerprint when two jobs would share a name (the same job twice is written once)."""
    out: dict[str, str] = {}
    notes = []
    skipped = 0
    for job in jobs:
        name = script_name(job).removesuffix(".sh") + ".yaml"
        if job.deployment is None:
            skipped += 1
            continue
        try:
            docs = manifest(job)
        except Refused as e:
            notes.append(f"{job.label()}: no manifest: {e}")
            continue
        text = safe_dump_all(docs)
        if out.get(name, text) != text:
            name = f"{name.removesuffix('.yaml')}-{dns_name(job.fingerprint.rsplit(':', 1)[-1])[:12]}.yaml"
        out[name] = text
    if skipped:
        notes.append(f"{skipped} of {len(jobs)} jobs have no deployment (one server: see --format sh)")
    return out, notes
