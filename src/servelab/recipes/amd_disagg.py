"""The Deployment of an InferenceX AMD multinode disaggregated job (mi355x-disagg runner), from per-role
profiles of what upstream's scripts start on each node.

InferenceX runs these jobs with benchmarks/multi_node/amd_utils: job.slurm starts server.sh on every node of
the allocation, one node per worker: nodes 0 .. xP-1 are the prefill servers, the next yD the decode servers,
and node 0 also runs the router (SGLang's sglang_router or ATOM's atomesh, port 30000: the endpoint) in front
of them.
What each node runs was recorded by running those scripts per node, in their dry-run mode
(scripts/amd_disagg_capture.py, capture/amd_disagg.py); `profiles_from` keeps, per config key and role, the
server command and the environment it inherits for each layout of that role (its TP, EP, DP attention, MTP,
and the job's largest concurrency where the commands differ with it): a job is rendered by placing its
workers on their nodes and listing them in the router's command.
"""

from __future__ import annotations

import json
import re
import shlex
from functools import cache
from importlib import resources
from pathlib import Path

from servelab.engines import Engine
from servelab.recipes.capture.amd_disagg import NODE_IPS
from servelab.recipes.engines.base import Deployment, NodeProcess, Role
from servelab.recipes.matrix import arm_settings

PROFILES_PATH = Path(str(resources.files("servelab.recipes") / "data" / "amd_disagg.json"))
RUNNER_PREFIX = "mi355x"
CLUSTER = "cluster:"  # a runner label naming a cluster of nodes (InferenceX's runners.yaml)
FRAMEWORKS = (f"{Engine.SGLANG}-disagg", f"{Engine.ATOM}-disagg")
ROUTER_PORT = 30000
# in a stored command: the node it runs on (a server names its own address: ATOM's KV proxy_ip), and where
# the router's worker list goes
SELF = "{{node:self}}"
WORKERS = "{{workers}}"
GPUS_PER_NODE = 8
# the addresses the capture gave the nodes, node 0 first
_CAPTURED_IP = re.compile(r"(?<![\d.])(" + "|".join(map(re.escape, NODE_IPS)) + r")(?![\d])")


def is_amd_disagg(row: dict) -> bool:
    """A disaggregated job InferenceX runs with benchmarks/multi_node/amd_utils: a fixed-seq-len one (runner
    mi355x-disagg), or an agentic one (runner cluster:mi355x-amds; its recipe script's HiCache settings reach
    the nodes through job.slurm, capture/amd_agentic.py)."""
    runner = str(row.get("runner", "")).removeprefix(CLUSTER)
    return runner.startswith(RUNNER_PREFIX) and row.get("framework") in FRAMEWORKS


def _concs(row: dict) -> list[int]:
    return row["conc"] if isinstance(row["conc"], list) else [row["conc"]]


def job_id(key: str, row: dict) -> str:
    p, d = row["prefill"], row["decode"]
    pools = f"p{p['num-worker']}x{p['tp']}ep{p['ep']}{'dpa' if p['dp-attn'] else ''}"
    pools += f"-d{d['num-worker']}x{d['tp']}ep{d['ep']}{'dpa' if d['dp-attn'] else ''}"
    mtp = arm_settings(row).get("DECODE_MTP_SIZE", "")
    scenario = row.get("scenario-type", "fixed-seq-len")
    concs = "x".join(map(str, _concs(row)))
    return f"{key} {scenario} {row.get('exp-name')} {pools} mtp{mtp} conc{concs}"


def layout(row: dict, role: Role, head: bool) -> dict[str, str]:
    """What a role's server command may depend on: its pool's layout, the other pool's (the scripts size
    the MoRI dispatch from both), the decode's MTP, the job's largest concurrency and lengths, and whether
    it runs on node 0. A profile keeps only the dimensions that tell its captured commands apart."""
    pool = row[role.value]
    other = row[(Role.DECODE if role == Role.PREFILL else Role.PREFILL).value]
    return {
        "tp": str(pool["tp"]),
        "ep": str(pool["ep"]),
        "dpa": str(bool(pool["dp-attn"])).lower(),
        "mtp": arm_settings(row).get("DECODE_MTP_SIZE", ""),
        "maxconc": str(max(_concs(row))),
        "isl": str(row.get("isl")),
        "osl": str(row.get("osl")),
        "node0": str(head).lower(),
        "other": f"tp{other['tp']}ep{other['ep']}dpa{str(bool(other['dp-attn'])).lower()}",
    }


def _name(dims: dict[str, str], keep: list[str]) -> str:
    return " ".join(f"{d}={dims[d]}" for d in keep)


# what a role's command depends on by construction (the pool's own layout); the other dimensions are kept
# only where the captured commands differ with them
ALWAYS = ("tp", "ep", "dpa", "mtp")


def _fewest(captured: list[tuple[dict[str, str], dict]]) -> list[str]:
    """The layout dimensions that tell a role's captured commands apart: the pool's own layout (ALWAYS), and
    each other dimension whose removal would give one layout two commands."""
    keep = list(captured[0][0])
    for d in [k for k in keep if k not in ALWAYS]:
        trial = [k for k in keep if k != d]
        seen: dict[str, dict] = {}
        if all(seen.setdefault(_name(dims, trial), e) == e for dims, e in captured):
            keep = trial
    return keep


def _nodes(row: dict) -> tuple[int, int]:
    return int(row["prefill"]["num-worker"]), int(row["decode"]["num-worker"])


def _placeholders(value: str) -> str:
    return _CAPTURED_IP.sub(lambda m: f"{{{{node:{NODE_IPS.index(m.group(1))}}}}}", value)


def _is_router(argv: list[str]) -> bool:
    """SGLang's router (sglang_router.launch_router) or ATOM's (atomesh launch)."""
    return any(a.endswith(".launch_router") for a in argv) or argv[0].rsplit("/", 1)[-1] == "atomesh"


KV_ROLES = {"kv_producer": Role.PREFILL, "kv_consumer": Role.DECODE}


def _server_role(argv: list[str]) -> Role | None:
    """prefill or decode: SGLang's --disaggregation-mode, ATOM's kv_role in --kv-transfer-config."""
    if "--disaggregation-mode" in argv:
        return Role(argv[argv.index("--disaggregation-mode") + 1])
    if "--kv-transfer-config" in argv:
        return KV_ROLES.get(json.loads(argv[argv.index("--kv-transfer-config") + 1]).get("kv_role"))
    return None


def _port(argv: list[str]) -> int:
    flag = next(f for f in ("--port", "--server-port") if f in argv)
    return int(argv[argv.index(flag) + 1])


def _router_flags(argv: list[str]) -> list[str]:
    """The router's command with its worker list (--prefill URL / --decode URL pairs, which the layout
    gives) as one WORKERS word."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in ("--prefill", "--decode"):
            if WORKERS not in out:
                out.append(WORKERS)
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def _worker_urls(row: dict, ports: dict[str, int]) -> list[str]:
    xp, yd = _nodes(row)
    urls = []
    for i in range(xp + yd):
        role = Role.PREFILL if i < xp else Role.DECODE
        urls += [f"--{role}", f"http://{{{{node:{i}}}}}:{ports[role.value]}"]
    return urls


def _with_workers(flags: list[str], urls: list[str]) -> list[str]:
    at = flags.index(WORKERS)
    return [*flags[:at], *urls, *flags[at + 1 :]]


def profiles_from(records: list[dict]) -> dict:
    """The per-role profiles of a capture (scripts/amd_disagg_capture.py): per key, the shared environment,
    and per role the layout dimensions its commands depend on (`dims`) and the command of each layout; one
    line naming the job when one layout gives two commands."""
    found: dict[str, dict[str, list[tuple[dict[str, str], dict]]]] = {}
    ports: dict[str, dict[str, int]] = {}
    for record in records:
        row, key = record["row"], record["key"]
        servers = [
            (node, c, role)
            for node in record["nodes"]
            for c in node["commands"]
            if (role := _server_role(c["argv"])) is not None
        ]
        for _, c, role in servers:
            if ports.setdefault(key, {}).setdefault(role.value, _port(c["argv"])) != _port(c["argv"]):
                raise ValueError(f"{record['id']}: the {role} servers serve on two ports")
        for node in record["nodes"]:
            me = f"{{{{node:{node['rank']}}}}}"
            for command in node["commands"]:
                argv = [_placeholders(a).replace(me, SELF) for a in command["argv"]]
                env = {k: _placeholders(v) for k, v in {**command["exported"], **command["env"]}.items()}
                role = _server_role(command["argv"])
                if role is not None:
                    dims = layout(row, role, node["rank"] == 0)
                elif _is_router(command["argv"]):
                    # the router inherits what node 0's scripts exported for the prefill layout
                    argv = _router_flags([_placeholders(a) for a in command["argv"]])
                    role, dims = Role.ROUTER, layout(row, Role.PREFILL, True)
                    whole = _with_workers(argv, _worker_urls(row, ports[key]))
                    if whole != [_placeholders(a) for a in command["argv"]]:
                        raise ValueError(f"{record['id']}: the router's workers are not the layout's")
                else:
                    continue  # the scripts' barriers, waits and benchmark: not processes of the deployment
                entry = {"argv": argv, "env": dict(sorted(env.items()))}
                found.setdefault(key, {}).setdefault(role.value, []).append((dims, entry))
    out = {}
    for key, by_role in found.items():
        variants = {}
        for role_name, captured in by_role.items():
            keep = _fewest(captured)
            named: dict[str, dict] = {}
            for dims, entry in captured:
                if named.setdefault(_name(dims, keep), entry) != entry:
                    raise ValueError(f"{key}: {role_name} {_name(dims, keep)!r} has two commands")
            variants[role_name] = (keep, named)
        out[key] = {**_compact(variants), "ports": ports[key]}
    return out


def _compact(by_role: dict[str, tuple[list[str], dict[str, dict]]]) -> dict:
    """A key's profile as stored: the environment every process of the key shares once (`env`), and per
    role its layout dimensions and, per layout, the command as one shell line and the variables that differ
    from the shared ones."""
    entries = [e for _, variants in by_role.values() for e in variants.values()]
    shared = {k: v for k, v in entries[0]["env"].items() if all(e["env"].get(k) == v for e in entries)}
    out: dict = {"env": shared}
    for role, (keep, variants) in by_role.items():
        out[role] = {
            "dims": keep,
            "layouts": {
                name: {
                    "argv": shlex.join(e["argv"]),
                    "env": {k: v for k, v in e["env"].items() if k not in shared},
                }
                for name, e in sorted(variants.items())
            },
        }
    return out


def _entry(profile: dict, role: Role, dims: dict[str, str]) -> tuple[list[str], dict[str, str]] | None:
    stored = profile.get(role.value)
    entry = stored and stored["layouts"].get(_name(dims, stored["dims"]))
    if not entry:
        return None
    return shlex.split(entry["argv"]), dict(sorted({**profile["env"], **entry["env"]}.items()))


@cache
def profiles() -> dict:
    return json.loads(PROFILES_PATH.read_text()) if PROFILES_PATH.is_file() else {}


def deployment_for(key: str, row: dict) -> tuple[Deployment | None, str | None]:
    """(deployment, why not) of an AMD disaggregated job; (None, None) for any other row."""
    if not is_amd_disagg(row):
        return None, None
    by_role = profiles().get(key)
    if by_role is None or "ports" not in by_role:
        return None, f"{row['framework']} on {row['runner']}: servelab has no capture of {key}'s scripts"
    xp, yd = _nodes(row)
    processes = []
    for i in range(xp + yd):
        role = Role.PREFILL if i < xp else Role.DECODE
        dims = layout(row, role, i == 0)
        entry = _entry(by_role, role, dims)
        if entry is None:
            return None, f"{row['framework']}: no captured {role} server of {key} for the layout {dims}"
        tp = int(row[role.value]["tp"])
        here = f"{{{{node:{i}}}}}"
        processes.append(
            NodeProcess(
                role=role,
                node=i,
                argv=[a.replace(SELF, here) for a in entry[0]],
                env=entry[1],
                port=by_role["ports"][role.value],
                gpus=min(tp, GPUS_PER_NODE),
            )
        )
    router = _entry(by_role, Role.ROUTER, layout(row, Role.PREFILL, True))
    if router is None:
        return None, f"{row['framework']}: no captured router of {key}"
    processes.append(
        NodeProcess(
            role=Role.ROUTER,
            node=0,
            argv=_with_workers(router[0], _worker_urls(row, by_role["ports"])),
            env=router[1],
            port=ROUTER_PORT,
        )
    )
    return Deployment(nodes=xp + yd, processes=processes, endpoint=len(processes) - 1), None
