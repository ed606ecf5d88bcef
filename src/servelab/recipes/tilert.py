"""The Deployment of an InferenceX TileRT disaggregated job (framework tilert, runner b200-multinode), from
what upstream's scripts start on each of its two nodes.

InferenceX runs it with benchmarks/multi_node/tilert_utils: submit.sh allocates two nodes, node 0 the decode
host (TileRT's decode server, which serves the KV control port the prefill's connector pushes to and an HTTP
port the router streams from), node 1 the prefill host (vLLM with TileRT's KV connector, and TileRT's PD
router in front of both on PORT, the endpoint). What each node runs was recorded by running those scripts
under bash with stubs (scripts/tilert_capture.py, capture/tilert.py); `profiles_from` keeps each job's
processes with the nodes' addresses as `{{node:N}}`, keyed by config key and lengths (the only inputs of the
job the commands take: the servers' max model length comes from them).

Not part of the deployment: run_node.sh's weight conversion before the decode server (a one-shot job whose
output is cached in TILERT_WEIGHTS_DIR; kept in the profile as `setup`), setup_deps.sh's pip installs, and
the images (the prefill node runs the arm's PREFILL_IMAGE, vLLM's, the decode node the job's TileRT image).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from servelab.engines import Engine
from servelab.recipes.capture.tilert import NODE_IPS
from servelab.recipes.captured import captured_deployment, placeholder
from servelab.recipes.engines.base import Deployment, Role

PROFILES_PATH = Path(str(resources.files("servelab.recipes") / "data" / "tilert.json"))
FRAMEWORK = "tilert"
GPUS_PER_NODE = 8
# each recorded command's role, by the module or program it runs
ROLES = {
    "tilert.pd_vllm.decode_server": Role.DECODE,
    Engine.VLLM.value: Role.PREFILL,
    "tilert.pd_vllm.pd_router": Role.ROUTER,
}
SETUP = "tilert.models.preprocess.weight_converter"
# the HTTP port of each role: the decode server's is the router's stream port (no health path: it is up
# while it runs, as run_node.sh watches it), vLLM's and the router's answer /health
PORT_FLAG = {Role.DECODE: "--http-port", Role.PREFILL: "--port", Role.ROUTER: "--port"}
HEALTH = {Role.DECODE: None, Role.PREFILL: "/health", Role.ROUTER: "/health"}
_placeholders = placeholder(NODE_IPS)


def is_tilert(row: dict) -> bool:
    return row.get("framework") == FRAMEWORK and bool(row.get("prefill")) and bool(row.get("decode"))


def job_id(key: str, row: dict) -> str:
    return f"{key} isl={row.get('isl')} osl={row.get('osl')}"


def _what(argv: list[str]) -> str:
    """The module a `python -m` command runs, else the program."""
    return argv[argv.index("-m") + 1] if "-m" in argv else argv[0]


def profiles_from(records: list[dict]) -> dict:
    """Per job id (config key and lengths), the processes its nodes start (role, node, argv, env, port, health
    path, GPUs) and the setup commands before them; one line naming the job when a node starts something the
    deployment has no role for, or when two jobs of one id start different things."""
    out: dict[str, dict] = {}
    for record in records:
        processes, setup = [], []
        for node in record["nodes"]:
            for command in node["commands"]:
                argv = [_placeholders(a) for a in command["argv"]]
                env = {k: _placeholders(v) for k, v in sorted(command["env"].items())}
                what = _what(argv)
                if what == SETUP:
                    setup.append({"node": node["rank"], "argv": argv, "env": env})
                    continue
                role = ROLES.get(what)
                if role is None:
                    raise ValueError(f"{record['id']}: node {node['rank']} starts {what}, which has no role")
                pool = record["row"].get(role.value) or {}
                processes.append(
                    {
                        "role": role.value,
                        "node": node["rank"],
                        "argv": argv,
                        "env": env,
                        "port": int(argv[argv.index(PORT_FLAG[role]) + 1]),
                        "health_path": HEALTH[role],
                        "gpus": min(int(pool.get("tp", 0)), GPUS_PER_NODE),
                    }
                )
        entry = {"nodes": len(record["nodes"]), "processes": processes, "setup": setup}
        if out.setdefault(record["id"], entry) != entry:
            raise ValueError(f"{record['id']}: two jobs start different processes")
    return out


def deployment_for(key: str, row: dict) -> tuple[Deployment | None, str | None]:
    """(deployment, why not) of a TileRT disaggregated job; (None, None) for any other row."""
    if not is_tilert(row):
        return None, None
    return captured_deployment(PROFILES_PATH, FRAMEWORK, job_id(key, row))
