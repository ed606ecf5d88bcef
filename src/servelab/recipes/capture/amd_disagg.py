"""Run InferenceX's AMD multinode server script (benchmarks/multi_node/amd_utils/server.sh) once per node of
a disaggregated job, in dry-run mode, and record the commands each node would start.

Upstream's chain is: the model script (multi_node/<prefix>_<precision>_mi355x_<framework>.sh) turns the row's
prefill/decode layout into submit.sh's arguments; submit.sh exports the pool sizes (PREFILL_TP_SIZE =
PREFILL_NODES * PREFILL_TP / PREFILL_WORKERS ...) and sbatch's job.slurm; job.slurm runs server.sh in one
container per node with the `-e` list of its docker run (`node_env`: NODE_RANK, NODE0_ADDR, IPADDRS, the
pools, the benchmark's lengths and concurrencies). server.sh with DRY_RUN=1 prints each command it would
start (`DRY RUN: <command>`) and starts nothing: the sandbox records those lines, and with each the variables
the scripts have exported when they print it (env.sh's MoRI/NCCL settings), which that process inherits.

The node's machine answers as upstream's mia1 nodes do: `ip route get` gives the node's address, `ip route`
a default route on eth0, ibv_devinfo the eight rails the runner names (rdma0..rdma7: the container does not
get the runner's IBDEVICES), hostname a mia1 name (env.sh picks the RDMA traffic class from it).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from servelab.recipes.capture import amd_agentic
from servelab.recipes.capture.sandbox import executable
from servelab.recipes.matrix import arm_settings

AMD_UTILS = "multi_node/amd_utils"
DOCKER_WS = "/workspace/benchmarks/multi_node/amd_utils"
# the addresses the capture gives the nodes; rendered back to `{{node:N}}`
NODE_IPS = [f"10.0.0.{10 + i}" for i in range(16)]
SLURM_JOB_ID = "4242"
RAILS = [f"rdma{i}" for i in range(8)]
TIMEOUT_S = float(os.environ.get("SERVELAB_AMD_TIMEOUT", "60"))

_IP = """#!/bin/sh
if [ "$1" = route ] && [ "$2" = get ]; then echo "1.1.1.1 via 10.255.0.1 dev eth0 src $SERVELAB_NODE_IP uid 0"
elif [ "$1" = route ]; then echo "default via 10.255.0.1 dev eth0 proto static"; fi
"""
_IBV = "#!/bin/sh\n" + "".join(f'echo "hca_id:\t{r}"\n' for r in RAILS)
_HOSTNAME = '#!/bin/sh\necho "mia1-node$SERVELAB_NODE_RANK"\n'
_INERT = ("apt-get", "apt", "pip", "pip3", "git", "curl", "sleep", "sudo", "docker")
# python3 runs for real (the scripts read models.yaml with it), except sync.py: the barrier the nodes meet at
# before they start (every node is up at once here)
_PYTHON = '#!/bin/sh\ncase "$1" in *sync.py) exit 0 ;; esac\nexec {} "$@"\n'
DRY = "DRY RUN: "
ATOM_DISAGG = "atom-disagg"
# what job.slurm's docker run adds for atom-disagg (its defaults; the runner's IBDEVICES, which it passes on)
ATOM_ENV = {
    "ATOM_WS_PATH": DOCKER_WS,
    "PREFILL_PORT": "8010",
    "DECODE_PORT": "8020",
    "ROUTER_PORT": "30000",
    "HANDSHAKE_PORT": "6301",
    "MEM_FRAC_STATIC": "0.85",
    "KV_CACHE_DTYPE": "fp8",
    "BLOCK_SIZE": "16",
    "MAX_NUM_SEQS": "256",
    "MAX_MODEL_LEN": "",
    "MAX_NUM_BATCHED_TOKENS": "",
    "EXTRA_SERVER_ARGS": "",
    "IBDEVICES": ",".join(RAILS),
}


def model_name(row: dict) -> str:
    return str(row["model"]).rsplit("/", 1)[-1]


def node_count(row: dict) -> int:
    """job.slurm runs one node per worker: NUM_NODES = xP + yD."""
    return int(row["prefill"]["num-worker"]) + int(row["decode"]["num-worker"])


def node_env(row: dict, rank: int) -> dict[str, str]:
    """What job.slurm's docker run gives server.sh on node `rank` of the row's job (sglang-disagg)."""
    p, d, s = row["prefill"], row["decode"], arm_settings(row)
    framework = row["framework"]
    nodes = node_count(row)
    concs = row["conc"] if isinstance(row["conc"], list) else [row["conc"]]
    pn, dn = int(s.get("PREFILL_NODES", 1)), int(s.get("DECODE_NODES", 1))
    agentic = row.get("scenario-type") == "agentic-coding"
    return {
        "SLURM_JOB_ID": SLURM_JOB_ID,
        "SLURM_JOB_NODELIST": ",".join(f"mia1-node{i}" for i in range(nodes)),
        "NNODES": str(nodes),
        "NODE_RANK": str(rank),
        "NODE0_ADDR": NODE_IPS[0],
        "MODEL_DIR": "/models",
        "MODEL_NAME": model_name(row),
        "GPUS_PER_NODE": "8",
        "xP": str(p["num-worker"]),
        "yD": str(d["num-worker"]),
        "IPADDRS": ",".join(NODE_IPS[:nodes]),
        "BENCH_INPUT_LEN": str(row.get("isl", "")),
        "BENCH_OUTPUT_LEN": str(row.get("osl", "")),
        "BENCH_RANDOM_RANGE_RATIO": "0.8",
        "BENCH_NUM_PROMPTS_MULTIPLIER": "10",
        "BENCH_MAX_CONCURRENCY": "x".join(map(str, concs)),
        "BENCH_REQUEST_RATE": "inf",
        "TQDM_MININTERVAL": "20",
        "BENCHMARK_LOGS_DIR": "/benchmark_logs",
        "ENGINE": framework,
        "WS_PATH": DOCKER_WS,
        "SGLANG_WS_PATH": DOCKER_WS,
        "RUN_EVAL": "false",
        "EVAL_ONLY": "false",
        "FRAMEWORK": framework,
        "PRECISION": row["precision"],
        "MODEL_PREFIX": row["model-prefix"],
        "RUNNER_TYPE": row["runner"],
        "SPEC_DECODING": row.get("spec-decoding", "none"),
        "DISAGG": "false",
        "PREFILL_TP_SIZE": str(pn * int(p["tp"]) // int(p["num-worker"])),
        "PREFILL_TP": str(p["tp"]),
        "PREFILL_NUM_WORKERS": str(p["num-worker"]),
        "PREFILL_ENABLE_EP": "false" if int(p["ep"]) == 1 else "true",
        "PREFILL_ENABLE_DP": "true" if p["dp-attn"] else "false",
        "PREFILL_EP": str(p["ep"]),
        "PREFILL_DP_ATTN": "true" if p["dp-attn"] else "false",
        "DECODE_TP_SIZE": str(dn * int(d["tp"]) // int(d["num-worker"])),
        "DECODE_TP": str(d["tp"]),
        "DECODE_NUM_WORKERS": str(d["num-worker"]),
        "DECODE_ENABLE_EP": "false" if int(d["ep"]) == 1 else "true",
        "DECODE_ENABLE_DP": "true" if d["dp-attn"] else "false",
        "DECODE_EP": str(d["ep"]),
        "DECODE_DP_ATTN": "true" if d["dp-attn"] else "false",
        "DECODE_MTP_SIZE": s.get("DECODE_MTP_SIZE", ""),
        "IS_MULTINODE": "true",
        "IS_AGENTIC": "1" if agentic else "0",
        "KV_OFFLOADING": "none",
        "PREFILL_ROUTER_POLICY": "random",
        "DECODE_ROUTER_POLICY": "random",
        "DURATION": "1800",
        "ENABLE_METRICS": "0",
        "DRY_RUN": "1",
        **(ATOM_ENV if framework == ATOM_DISAGG else {}),
    }


def split_command(line: str) -> dict:
    """A printed command: its leading VAR=value words as env, the rest as argv."""
    words = shlex.split(line)
    env = {}
    while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
        k, _, v = words.pop(0).partition("=")
        env[k] = v
    return {"argv": words, "env": env}


def run_node(benchmarks: Path, row: dict, rank: int, submitted: dict[str, str] | None = None) -> dict:
    """The commands server.sh prints for node `rank` (dry run), and the variables its scripts exported. An
    agentic job's container also gets what its recipe script `submitted` (capture/amd_agentic.py): job.slurm's
    variables from it, and its HiCache/Mooncake config file."""
    with tempfile.TemporaryDirectory(prefix="servelab-amd-") as tmp_name:
        tmp = Path(tmp_name)
        ws = tmp / "workspace" / "benchmarks" / AMD_UTILS
        shutil.copytree(benchmarks / AMD_UTILS, ws)
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        scripts = {"ip": _IP, "ibv_devinfo": _IBV, "hostname": _HOSTNAME}
        scripts |= {n: "#!/bin/sh\nexit 0\n" for n in _INERT}
        # models.yaml is read by an inline python3 with PyYAML, as in upstream's container
        scripts |= {n: _PYTHON.format(shlex.quote(sys.executable)) for n in ("python3", "python")}
        for name, text in scripts.items():
            executable(bin_dir / name, text)
        given_env = node_env(row, rank)
        config = tmp / "config" / "hicache_mc.env"
        if submitted is not None:
            given_env |= amd_agentic.node_overrides(submitted)
            config.parent.mkdir()
            config.write_text(amd_agentic.config_file(submitted))
        env = {k: v.replace("/workspace", str(tmp / "workspace")) for k, v in given_env.items()}
        given = dict(env)
        env |= {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "HOME": str(tmp),
            "SERVELAB_NODE_IP": NODE_IPS[rank],
            "SERVELAB_NODE_RANK": str(rank),
        }
        dumps = tmp / "env"
        dumps.mkdir()
        (tmp / "run_logs").mkdir()
        # each printed command's environment is what the scripts have exported when they print it (what
        # the process would inherit): an `echo` that records it before each DRY RUN line
        wrapper = (
            "__servelab_n=0\n"
            "echo() {\n"
            f'  if [[ "${{1:-}}" == "{DRY}"* ]]; then\n'
            "    __servelab_n=$((__servelab_n + 1))\n"
            f'    env -0 > {shlex.quote(str(dumps))}/"$__servelab_n"\n'
            "  fi\n"
            '  builtin echo "$@"\n'
            "}\n"
            f"source {shlex.quote(str(ws / 'server.sh'))}\n"
        )
        for name in ("server_sglang.sh", "server_atom.sh", "server.sh", "env.sh", "setup_deps.sh"):
            path = ws / name
            if path.exists():
                text = path.read_text().replace("/run_logs", str(tmp / "run_logs"))
                path.write_text(text.replace(amd_agentic.CONFIG_PATH, str(config)))
        done = subprocess.run(
            ["bash", "-c", wrapper],
            cwd=tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        printed = [line for line in done.stdout.splitlines() if line.startswith(DRY)]
        commands = []
        for i, line in enumerate(printed, 1):
            command = split_command(_upstream(line[len(DRY) :], tmp))
            exported: dict[str, str] = {}
            for item in (dumps / str(i)).read_text().split("\0"):
                k, sep, v = item.partition("=")
                if sep and k not in given and k not in env and k not in ("PWD", "OLDPWD", "SHLVL", "_"):
                    exported[k] = _upstream(v, tmp)
            commands.append({**command, "exported": dict(sorted(exported.items()))})
        return {"rank": rank, "commands": commands, "status": done.returncode}


def _upstream(text: str, tmp: Path) -> str:
    """The sandbox's paths in `text` as the container has them."""
    text = text.replace(str(tmp / "config" / "hicache_mc.env"), amd_agentic.CONFIG_PATH)
    return text.replace(str(tmp / "workspace"), "/workspace").replace(str(tmp / "run_logs"), "/run_logs")


def capture_row(benchmarks: Path, row: dict) -> list[dict]:
    submitted = amd_agentic.submitted(benchmarks, row) if amd_agentic.is_agentic(row) else None
    return [run_node(benchmarks, row, rank, submitted) for rank in range(node_count(row))]
