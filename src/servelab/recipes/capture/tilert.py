"""Run InferenceX's TileRT disaggregated launch (runner b200-multinode) under bash with stubs, and record what
each of its two nodes starts.

Upstream's chain: the runner's launcher (runners/launch_b200-dgxc.sh, which launch_b200-dgxc-slurm.sh links
to) exports the cluster's UCX rails and TILERT_WEIGHTS_DIR and execs the model script
(benchmarks/multi_node/glm5.1_fp8_b200_tilert-disagg.sh), which sets the model's TileRT settings and execs
tilert_utils/submit.sh: salloc two nodes, the first the decode host, the second the prefill host, then one
`srun ... bash run_node.sh` per node with TILERT_ROLE, DECODE_HOST, PREFILL_HOST and PORT exported.
run_node.sh installs TileRT (setup_deps.sh) and starts, on the decode node, the weight conversion (once,
cached) and TileRT's decode server; on the prefill node vLLM's prefill server with TileRT's KV connector and
TileRT's PD router (PORT, the endpoint), then the benchmark.

Here the cluster tools are stubs (salloc, squeue, scontrol give two nodes, 127.0.0.2 and 127.0.0.3; srun runs
the node's command with what its --export names; image imports do nothing), the servers are recorders
(python, vllm: their argv and environment, started nothing), the benchmark library is servelab's stub
(benchmark_lib.sh), and the cluster's file systems (/lustre, /home/sa-shared) are folders of the sandbox,
the model's folder holding empty stand-ins for the tokenizer files run_node.sh stages. The prefill node waits
for the decode server's control port and for vLLM's port before it goes on: the capture listens on both.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
from importlib import resources
from pathlib import Path

from servelab.engines import Engine
from servelab.recipes.capture.sandbox import executable
from servelab.recipes.capture.workflow import workflow_env

LAUNCHER = "runners/launch_b200-dgxc.sh"
RUNNER_NAME = "b200-dgxc-slurm_7"  # a node of the b200-multinode label (its launcher links to LAUNCHER)
UTILS = "benchmarks/multi_node/tilert_utils"
# the nodes' addresses, decode host first (submit.sh: HOSTS[0] decode, HOSTS[1] prefill)
NODE_IPS = ["127.0.0.2", "127.0.0.3"]
SLURM_JOB_ID = "4242"
# what the prefill node waits for before it goes on (run_node.sh's defaults: the decode server's control port,
# vLLM's port), each open once the server that serves it has started (a recorded command naming it)
LISTEN = [((NODE_IPS[0], 5556), "tilert.pd_vllm.decode_server"), ((NODE_IPS[1], 8000), Engine.VLLM.value)]
# the clusters' file systems the scripts name, as folders of the sandbox
CLUSTER_ROOTS = ("/lustre", "/home/sa-shared")
# the files run_node.sh stages from the model's folder (it checks the tokenizer and chat template are there)
MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
INERT: tuple[str, ...] = ("salloc", "pip", "pip3", "sleep", "flock", "hostname", "unsquashfs", "enroot")
INERT += ("ibv_devices", "curl", "git", "nvidia-smi")
# what the installs setup_deps.sh checks for answer (the versions it pins are installed)
VERSIONS = {"tilert": "0.1.5.post2", Engine.VLLM.value: "0.26.0", "transformers": "5.4.0", "nixl": "1.3.1"}
# variables the stubs and bash set: not what the scripts give a process
OWN_VARS = ("PATH", "HOME", "PWD", "OLDPWD", "SHLVL", "_", "SLURM_JOB_ID", "SERVELAB_RECORD", "SERVELAB_NODE")
TIMEOUT_S = float(os.environ.get("SERVELAB_TILERT_TIMEOUT", "60"))

_SQUEUE = f"""#!/bin/sh
case " $* " in *" -j "*) echo "node[7-8]" ;; *) echo {SLURM_JOB_ID} ;; esac
"""
_SCONTROL = "#!/bin/sh\n" + "".join(f"echo {ip}\n" for ip in NODE_IPS)


class _Listeners:
    """TCP listeners on the ports the prefill node waits for: bound at once (a connection is refused), each
    listening, accepting and closing every connection once its server's command is recorded."""

    def __init__(self, record: Path) -> None:
        self.record = record
        self.socks: list[socket.socket] = []
        self.done = threading.Event()

    def __enter__(self) -> _Listeners:
        for addr, server in LISTEN:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(addr)
            self.socks.append(s)
            threading.Thread(target=self._serve, args=(s, server), daemon=True).start()
        return self

    def _serve(self, s: socket.socket, server: str) -> None:
        while not self.done.is_set():
            text = self.record.read_text() if self.record.exists() else ""
            if any(server in json.loads(line)["argv"][:3] for line in text.split("\n")[:-1]):  # whole lines
                break
            self.done.wait(0.05)
        else:
            return
        s.listen()
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            conn.close()

    def __exit__(self, *exc) -> None:
        self.done.set()
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)  # wakes an accept() blocked in its thread
            except OSError:
                pass  # never listened
            s.close()


def _copy(src: Path, dst: Path, rewrite: dict[str, str]) -> None:
    text = src.read_text()
    for old, new in rewrite.items():
        text = text.replace(old, new)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(text)


def capture_row(inferencex: Path, row: dict) -> dict:
    """The commands each node of the row's job starts (`nodes`, node 0 the decode host: argv and the
    variables the scripts gave it, sandbox paths and node addresses as upstream has them) and the
    benchmark's arguments (`bench`); `tail`: the scripts' last lines of output."""
    with tempfile.TemporaryDirectory(prefix="servelab-tilert-") as t:
        tmp = Path(t)
        ws, bin_dir, machine = tmp / "ix", tmp / "bin", tmp / "machine"
        bin_dir.mkdir()
        rewrite = {root: f"{machine}{root}" for root in CLUSTER_ROOTS}
        rewrite["/workspace"] = str(ws)  # the containers mount the workspace there
        script = f"benchmarks/multi_node/{row['exp-name'].split('_')[0]}_{row['precision']}_b200_"
        script += f"{row['framework']}-disagg.sh"
        for rel in [LAUNCHER, script, *(f"{UTILS}/{f.name}" for f in (inferencex / UTILS).iterdir())]:
            _copy(inferencex / rel, ws / rel, rewrite)
        lib = resources.files("servelab.recipes.capture") / "benchmark_lib.sh"
        (ws / "benchmarks/benchmark_lib.sh").write_bytes(lib.read_bytes())
        env = workflow_env(row, ws, RUNNER_NAME)
        for name in INERT:
            executable(bin_dir / name, "#!/bin/sh\nexit 0\n")
        executable(bin_dir / "squeue", _SQUEUE)
        executable(bin_dir / "scontrol", _SCONTROL)
        package = resources.files("servelab.recipes.capture")
        for stub in ("tilert_srun.py", "tilert_recorder.py"):
            (tmp / stub).write_bytes((package / stub).read_bytes())
        python = shlex.quote(sys.executable)
        executable(bin_dir / "srun", f'#!/bin/sh\nexec {python} -I {tmp / "tilert_srun.py"} "$@"\n')
        for name in ("python", "python3", Engine.VLLM.value):
            executable(
                bin_dir / name, f'#!/bin/sh\nexec {python} -I {tmp / "tilert_recorder.py"} "$0" "$@"\n'
            )
        model = Path(f"{machine}{_model_path(inferencex)}")
        model.mkdir(parents=True)
        for name in MODEL_FILES:
            (model / name).write_text("")
        record, bench = tmp / "record.jsonl", tmp / "bench.args"
        base = {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "HOME": str(tmp / "home"),
            "USER": "runner",
            "LC_CTYPE": "C.UTF-8",  # the benchmark template's (Python would set it in the recorders)
            "SERVELAB_RECORD": str(record),
            "SERVELAB_BENCH_CAPTURE": str(bench),
            "SERVELAB_VERSIONS": json.dumps(VERSIONS),
            "SERVELAB_SLURM_JOB_ID": SLURM_JOB_ID,
            **env,
        }
        with _Listeners(record):
            run = subprocess.run(
                ["bash", str(ws / LAUNCHER)],
                cwd=ws,
                env=base,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        lines = record.read_text().splitlines() if record.exists() else []
        nodes: list[dict] = [{"rank": i, "commands": []} for i in range(len(NODE_IPS))]
        for line in lines:
            got = json.loads(line)
            added = {
                k: v
                for k, v in got["env"].items()
                if k not in OWN_VARS and not k.startswith("SERVELAB_") and base.get(k) != v
            }
            command = {
                "argv": [_upstream(a, tmp, ws) for a in got["argv"]],
                "env": {k: _upstream(v, tmp, ws) for k, v in sorted(added.items())},
            }
            nodes[NODE_IPS.index(got["node"])]["commands"].append(command)
        args = bench.read_text().split("\0")[:-1] if bench.exists() else []
        # the router's process id differs run to run: recorded as the variable run_node.sh passes
        before = ["", *args[:-1]]
        args = ["$ROUTER_PID" if b == "--server-pid" else a for b, a in zip(before, args, strict=True)]
        return {
            "nodes": nodes,
            "bench": [_upstream(a, tmp, ws) for a in args],
            "tail": [_upstream(x, tmp, ws) for x in (run.stdout + run.stderr).splitlines()[-5:]],
        }


def _model_path(inferencex: Path) -> str:
    """The model folder the launcher exports for GLM-5.1 FP8 (a line `export MODEL_PATH=...` after the
    glm5.1/fp8 branch)."""
    lines = (inferencex / LAUNCHER).read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"glm5.1" && $PRECISION == "fp8"' in line)
    line = next(line for line in lines[at:] if "export MODEL_PATH=" in line)
    return line.split("=", 1)[1].strip().strip('"')


def _upstream(value: str, tmp: Path, ws: Path) -> str:
    """A value as upstream has it: the workspace as /workspace (where the containers mount it), the cluster's
    file systems at their own paths."""
    return value.replace(str(ws), "/workspace").replace(f"{tmp}/machine", "").replace(str(tmp), "$TMP")
