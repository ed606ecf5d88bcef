"""The Deployment of an InferenceX llm-d disaggregated job (framework llmd-vllm), from what upstream's
scripts start on each node of its SLURM job.

InferenceX runs it with benchmarks/multi_node/llm-d: job.slurm starts server.sh on every node, prefill nodes
first: vLLM on each (one engine per PREFILL_WORKERS / DECODE_WORKERS group of nodes, in vLLM's data-parallel
hybrid-LB mode, or multi-node TP with `--headless` followers), llm-d's pd-sidecar beside each decode vLLM
that serves (EPP routes decode requests to it; it asks the prefill and pulls the KV over NIXL), and on the
first decode node EPP (llm-d's endpoint picker, reading the endpoint list and its scheduling config) and
Envoy in front (the endpoint, its port the listener of benchmarks/llm-d/envoy.yaml). What each node runs was
recorded by running those scripts under bash with stubs (scripts/llmd_capture.py, capture/llmd.py);
`profiles_from` keeps each job's processes with the nodes' addresses as `{{node:N}}`, and the files EPP and
Envoy read (`files`: the endpoint list and EPP's config server.sh writes under /tmp, Envoy's config, which
job.slurm mounts at /etc/envoy; the processes' argv name them at those paths).

Not part of the deployment: the image (the job's, every node), job.slurm's container mounts (the model at
/models, the logs at /benchmark_logs), and the waits server.sh makes between the processes (each vLLM's
health, EPP's gRPC port before Envoy, Envoy's admin /ready on 9901, every prefill vLLM before the benchmark).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import yaml

from servelab.engines import Engine
from servelab.recipes.capture.llmd import NODE_IPS
from servelab.recipes.captured import captured_deployment, placeholder
from servelab.recipes.engines.base import Deployment, Role
from servelab.recipes.matrix import arm_settings

PROFILES_PATH = Path(str(resources.files("servelab.recipes") / "data" / "llmd.json"))
FRAMEWORK = "llmd-vllm"
KV_ROLES = {"kv_producer": Role.PREFILL, "kv_consumer": Role.DECODE}
# the files the processes read, by the path their argv or config names -> the deployment's file name
FILES = {
    "/tmp/endpoints.yaml": "endpoints.yaml",
    "/tmp/epp-config-from-recipe.yaml": "epp-config-from-recipe.yaml",
    "/etc/envoy/envoy.yaml": "envoy.yaml",
}
_placeholders = placeholder(NODE_IPS)


def is_llmd(row: dict) -> bool:
    return row.get("framework") == FRAMEWORK and bool(row.get("prefill")) and bool(row.get("decode"))


def job_id(key: str, row: dict) -> str:
    """What the commands depend on: the arms' settings (nodes, workers, GPUs per node, recipe), the lengths
    and the concurrencies (server.sh's environment carries them)."""
    concs = row["conc"] if isinstance(row["conc"], list) else [row["conc"]]
    settings = " ".join(f"{k}={v}" for k, v in sorted(arm_settings(row).items()))
    return f"{key} isl={row.get('isl')} osl={row.get('osl')} conc={'x'.join(map(str, concs))} {settings}"


def _flag(argv: list[str], name: str) -> str | None:
    """A flag's value, given as `--name value` or `--name=value`."""
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _process(
    argv: list[str], env: dict, node: int, gpus: int, envoy_port: int
) -> tuple[dict, str | None, int]:
    """A recorded command as a process of the deployment: its role, port and health path."""
    program = argv[0]
    if program == Engine.VLLM:
        kv = json.loads(_flag(argv, "--kv_transfer_config") or "{}")
        role, headless = KV_ROLES[kv["kv_role"]], "--headless" in argv
        # a --headless follower serves no HTTP: it is up while it runs
        port = None if headless else int(_flag(argv, "--port") or 0)
        health = None if headless else "/health"
    elif program == "pd-sidecar":  # the decode endpoint EPP routes to (endpoints.yaml labels it decode)
        role, port, health, gpus = Role.DECODE, int(_flag(argv, "--port") or 0), "/health", 0
    elif program == "epp":  # gRPC (Envoy's ext_proc): no HTTP health path
        role, port, health, gpus = Role.SIDE, int(_flag(argv, "--grpc-port") or 0), None, 0
    elif program == "envoy":  # its /health routes through EPP (503 until traffic flows): up while it runs
        role, port, health, gpus = Role.ROUTER, envoy_port, None, 0
    else:
        raise ValueError(f"node {node} starts {program}, which has no role")
    return {"role": role.value, "node": node, "argv": argv, "env": env, "port": port}, health, gpus


def _envoy_port(envoy_yaml: str) -> int:
    listener = yaml.safe_load(envoy_yaml)["static_resources"]["listeners"][0]
    return int(listener["address"]["socket_address"]["port_value"])


def profiles_from(records: list[dict]) -> dict:
    """Per job id, the processes its nodes start (role, node, argv, env, port, health path, GPUs) and the
    files they read; one line naming the job when two jobs of one id start different things."""
    out: dict[str, dict] = {}
    for record in records:
        files = {FILES[path]: _placeholders(text) for path, text in sorted(record["files"].items())}
        envoy_port = _envoy_port(files["envoy.yaml"])
        gpus_per_node = int(arm_settings(record["row"]).get("GPUS_PER_NODE", 8))
        processes = []
        for node in record["nodes"]:
            for command in node["commands"]:
                argv = [_placeholders(a) for a in command["argv"]]
                env = {k: _placeholders(v) for k, v in sorted(command["env"].items())}
                entry, health, gpus = _process(argv, env, node["rank"], gpus_per_node, envoy_port)
                processes.append({**entry, "health_path": health, "gpus": gpus})
        entry = {"nodes": len(record["nodes"]), "processes": processes, "files": files}
        if out.setdefault(record["id"], entry) != entry:
            raise ValueError(f"{record['id']}: two jobs start different processes")
    return out


def deployment_for(key: str, row: dict) -> tuple[Deployment | None, str | None]:
    """(deployment, why not) of an llm-d disaggregated job; (None, None) for any other row."""
    if not is_llmd(row):
        return None, None
    return captured_deployment(PROFILES_PATH, FRAMEWORK, job_id(key, row))
