"""Run InferenceX's llm-d disaggregated launch (framework llmd-vllm, runner gb200) under bash with stubs, and
record what each node of its SLURM job starts.

Upstream's chain: the runner's launcher (runners/launch_gb200-nv.sh) exports the model's path and served
name, imports the image's squash file, picks the pyxis container engine and runs the model's wrapper
(benchmarks/multi_node/dsv4_fp4_gb200_llmd-vllm-disagg.sh), which runs llm-d/submit.sh: it sizes the pools
(PREFILL_DP_SIZE = nodes / workers x GPUS_PER_NODE ...) and submits llm-d/job.slurm with sbatch. job.slurm
reads each node's address and sruns llm-d/server.sh in one container per node (NODE_RANK = SLURM_PROCID):
vLLM on every node (prefill ranks first, then decode, each engine spanning its nodes in data-parallel hybrid
LB or multi-node TP mode, the role's flags and environment from the recipe in benchmarks/multi_node/
llm-d-recipes), llm-d's pd-sidecar beside each decode vLLM that serves, and on the decode leader (the
coordinator) the endpoint list for EPP's file discovery, EPP (llm-d's endpoint picker) and Envoy (port
8080, the endpoint) in front of them, then the benchmark.

Here the launcher runs in a mount and network namespace of its own (`unshare`, so root): the cluster's /mnt
is a private tmpfs, and the loopback EPP's port is probed on is the namespace's. sbatch runs job.slurm at
once (its output to its --output file); scontrol, srun (capture/llmd_srun.py: one run of the containers'
command per node, rank 0 first), squeue (no job is active) and curl (every probe answers 200) are stubs; the
servers are recorders (capture/llmd_recorder.py); python3 is this Python (the scripts read YAML with it),
except that it answers server.sh's question for the node's address and default interface with the node's
(eth0); `uname -m` answers aarch64, as GB200's Grace CPUs do; benchmark_lib.sh is servelab's stub. The
containers' mounts are the workspace's folders (the scripts' container paths rewritten to them, and back
in what is recorded).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

from servelab.engines import Engine
from servelab.recipes.capture.sandbox import executable
from servelab.recipes.capture.workflow import workflow_env

LAUNCHER = "runners/launch_gb200-nv.sh"
RUNNER_NAME = "gb200-nv_0"
# the cluster's squash folder (the launcher's SQUASH_DIR): job.slurm checks the image's squash file is there
# and not empty (the launcher's import skips a file `unsquashfs -l` reads, as the stub reads any)
SQUASH_DIR = "/mnt/lustre01/users-public/sa-shared"
LLMD = "benchmarks/multi_node/llm-d"
# the nodes' addresses, rank order
NODE_IPS = [f"10.0.0.{10 + i}" for i in range(16)]
SLURM_JOB_ID = "4242"
# the scripts' container paths -> where the mounts put them (in the workspace), and back
MOUNTS = {
    "/etc/llmd-recipes": "{ws}/benchmarks/multi_node/llm-d-recipes",
    "/etc/epp/config.yaml": "{ws}/benchmarks/llm-d/epp-config.yaml",
    "/etc/envoy/envoy.yaml": "{ws}/benchmarks/llm-d/envoy.yaml",
    "/benchmark_logs": "{ws}/benchmark_logs",
    "/tmp/": "{tmp}/container-tmp/",
    "/workspace": "{ws}",
}
SCRIPT_SUFFIXES = (".sh", ".slurm")
# the files EPP and Envoy read (by their container paths): the coordinator writes the first two, job.slurm
# mounts the third; read back after the run
READ = ("/tmp/endpoints.yaml", "/tmp/epp-config-from-recipe.yaml", "/etc/envoy/envoy.yaml")
INERT = (
    "enroot",
    "unsquashfs",
    "flock",
    "sleep",
    "scancel",
    "hostname",
    "nvidia-smi",
    "git",
    "docker",
    "pip",
)
RECORDED = (Engine.VLLM.value, "pd-sidecar", "epp", "envoy")
# variables the stubs, SLURM and bash set: not what the scripts give a process
OWN_VARS = (
    "PATH",
    "HOME",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    "SLURM_JOB_ID",
    "SLURM_PROCID",
    "SLURM_JOB_NODELIST",
)
TIMEOUT_S = 120.0

_SBATCH = """#!/bin/bash
# sbatch: run the script at once in the job (SLURM_JOB_ID, SLURM_JOB_NODELIST), output to its --output file
out=/dev/null; script="${@: -1}"
for a in "$@"; do case "$prev" in --output) out="$a" ;; esac; prev="$a"; done
out="${out//%j/$SERVELAB_SLURM_JOB_ID}"
export SLURM_JOB_ID=$SERVELAB_SLURM_JOB_ID SLURM_JOB_NODELIST="node[0-$((NUM_NODES - 1))]"
bash "$script" > "$out" 2>&1
echo "$SERVELAB_SLURM_JOB_ID"
"""
_SCONTROL = (
    '#!/bin/sh\n[ "$2" = hostnames ] && for i in $(seq 0 $((NUM_NODES - 1))); do echo "node$i"; done\n'
)
_CURL = '#!/bin/sh\ncase " $* " in *--write-out*) printf 200 ;; esac\nexit 0\n'
_UNAME = '#!/bin/sh\n[ "$1" = -m ] && echo aarch64 || echo Linux\n'
# python3: this Python, except server.sh's question for the node's address and default interface
_PYTHON = """#!/bin/sh
case "$2" in *1.1.1.1*) [ "$1" = -c ] && { echo "$SERVELAB_NODE_IP eth0"; exit 0; } ;; esac
exec PYTHON "$@"
"""


def _copy_tree(src: Path, dst: Path, rewrite: dict[str, str]) -> None:
    """src's files into dst (their modes too), each path of `rewrite` (at the start of a path) replaced."""
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: not in the InferenceX checkout")
    pattern = re.compile(r"(?<![\w.$/-])(" + "|".join(map(re.escape, rewrite)) + ")") if rewrite else None
    for f in src.rglob("*"):
        if f.is_file():
            text = f.read_text()
            # the scripts' container paths only: a recipe's own paths (EPP's file discovery) stay
            if pattern is not None and f.suffix in SCRIPT_SUFFIXES:
                text = pattern.sub(lambda m: rewrite[m.group(1)], text)
            out = dst / f.relative_to(src)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
            shutil.copymode(f, out)


def capture_row(inferencex: Path, row: dict) -> dict:
    """The commands each node of the row's job starts (`nodes`: argv and the variables the scripts gave it,
    node addresses and paths as upstream has them), the files the coordinator wrote for EPP (`files`), the
    benchmark's arguments at the last concurrency (`bench`) and the scripts' last lines (`tail`)."""
    with tempfile.TemporaryDirectory(prefix="servelab-llmd-") as t:
        tmp = Path(t)
        ws, bin_dir = tmp / "ix", tmp / "bin"
        bin_dir.mkdir()
        (tmp / "container-tmp").mkdir()
        mounts = {k: v.format(ws=ws, tmp=tmp) for k, v in MOUNTS.items()}
        for rel in ("runners", "benchmarks/multi_node", "benchmarks/llm-d"):
            rewrite = mounts if rel == "benchmarks/multi_node" else {}
            _copy_tree(inferencex / rel, ws / rel, rewrite)
        lib = resources.files("servelab.recipes.capture")
        (ws / "benchmarks/benchmark_lib.sh").write_bytes((lib / "benchmark_lib.sh").read_bytes())
        for stub in ("llmd_srun.py", "llmd_recorder.py"):
            (tmp / stub).write_bytes((lib / stub).read_bytes())
        python = shlex.quote(sys.executable)
        for name in INERT:
            executable(bin_dir / name, "#!/bin/sh\nexit 0\n")
        executable(bin_dir / "squeue", "#!/bin/sh\nexit 0\n")
        executable(bin_dir / "sbatch", _SBATCH)
        executable(bin_dir / "scontrol", _SCONTROL)
        executable(bin_dir / "curl", _CURL)
        executable(bin_dir / "uname", _UNAME)
        executable(bin_dir / "python3", _PYTHON.replace("PYTHON", python))
        executable(bin_dir / "srun", f'#!/bin/sh\nexec {python} -I {tmp / "llmd_srun.py"} "$@"\n')
        for name in RECORDED:
            executable(bin_dir / name, f'#!/bin/sh\nexec {python} -I {tmp / "llmd_recorder.py"} "$0" "$@"\n')
        record, bench = tmp / "record.jsonl", tmp / "bench.args"
        base = {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "HOME": str(tmp / "home"),
            "USER": "runner",
            "LC_CTYPE": "C.UTF-8",  # the benchmark template's (Python would set it in the recorders)
            "SERVELAB_RECORD": str(record),
            "SERVELAB_BENCH_CAPTURE": str(bench),
            "SERVELAB_SLURM_JOB_ID": SLURM_JOB_ID,
            "SERVELAB_NODE_IPS": ",".join(NODE_IPS),
            **workflow_env(row, ws, RUNNER_NAME),
        }
        # a private /mnt (the cluster's file systems) and loopback (EPP's port), as the srt-slurm capture
        squash = shlex.quote(f"{SQUASH_DIR}/{re.sub(r'[/:@#]', '_', row['image'])}.sqsh")
        cmd = f"mount -t tmpfs servelab-stub /mnt && ip link set lo up && mkdir -p {shlex.quote(SQUASH_DIR)}"
        cmd += f' && echo servelab-stand-in > {squash} && exec bash "{ws / LAUNCHER}"'
        run = subprocess.run(
            ["unshare", "--mount", "--net", "--propagation", "private", "bash", "-c", cmd],
            cwd=ws,
            env=base,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        back = [(v, k) for k, v in mounts.items()] + [(str(ws), "$GITHUB_WORKSPACE")]

        def upstream(value: str) -> str:
            for local, container in back:
                value = value.replace(local, container)
            return value

        nodes: list[dict] = []
        for line in record.read_text().splitlines() if record.exists() else []:
            got = json.loads(line)
            added = {
                k: v
                for k, v in got["env"].items()
                if k not in OWN_VARS and not k.startswith("SERVELAB_") and base.get(k) != v
            }
            rank = int(got["node"])
            while len(nodes) <= rank:
                nodes.append({"rank": len(nodes), "commands": []})
            nodes[rank]["commands"].append(
                {
                    "argv": [upstream(a) for a in got["argv"]],
                    "env": {k: upstream(v) for k, v in sorted(added.items())},
                }
            )
        files = {}
        for path in READ:
            mount = next(m for m in mounts if path.startswith(m))
            local = Path(mounts[mount] + path.removeprefix(mount))
            if local.exists():
                files[path] = upstream(local.read_text())
        args = bench.read_text().split("\0")[:-1] if bench.exists() else []
        return {
            "nodes": nodes,
            "files": files,
            "bench": [upstream(a) for a in args],
            "tail": [upstream(x) for x in (run.stdout + run.stderr).splitlines()[-8:]],
        }
