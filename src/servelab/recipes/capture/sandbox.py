"""Run one InferenceX launch script for one job under bash, with stub servers, and record what it launched.

InferenceX starts a single-node job with `runners/launch_<machine>.sh`, which picks
`benchmarks/single_node/<scenario>/<model-prefix>_<precision>_<gpu>[_<framework>][_mtp].sh` (a
framework-tagged name first, the historical name second: `script_for`; the scenario directory is
`fixed_seq_len/` or, for agentic-coding jobs, `agentic/`) and runs it with the job's TP, EP, DP_ATTENTION,
CONC, ISL, OSL, MAX_MODEL_LEN... in the environment (`job_env`; an agentic job has no lengths but its KV
offload settings: `agentic_job_env`). A `Sandbox` runs such a script as that would, except that:

- the environment is clean: only the job's variables, PATH (the stubs first, then /usr/bin:/bin) and HOME (the
  sandbox), nothing of the caller's;
- the server commands (vllm, sglang, trtllm-serve, python3 -m <server module>, mpirun) are stubs that record
  their argv, environment and the files the argv names, and start nothing; GPU, download, package, container
  and network tools (nvidia-smi, hf, pip, docker, curl, git...) are stubs that do nothing and reach nothing;
- InferenceX's benchmark_lib.sh is a stub in which nothing waits, monitors or benchmarks (its
  run_benchmark_serving records the arguments the script gives the benchmark client);
- it runs in a temporary directory (its /workspace rewritten into it), with a time limit, after which the
  script's whole process group is killed.

The scripts are the user's own checkout (or the pinned copies servelab's profiles were made from): as trusted
as the checkout they come from, which upstream's CI runs as they are. A script may still run any other command
of the machine; the sandbox keeps it off the servers, the network tools and the caller's environment, not off
the machine.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

from servelab.engines import Engine

SCENARIO_DIR = "single_node/fixed_seq_len"
AGENTIC_DIR = "single_node/agentic"
SCENARIO_DIRS = {"fixed-seq-len": SCENARIO_DIR, "agentic-coding": AGENTIC_DIR}
TEMPLATES = "single_node/chat_templates"
# InferenceX's benchmark template sets these for every job (.github/workflows/benchmark-tmpl.yml), and the
# launchers pass PORT=8888.
BASE_ENV = {
    "LC_CTYPE": "C.UTF-8",
    "RANDOM_RANGE_RATIO": "0.8",
    "PORT": "8888",
    "RESULT_FILENAME": "result",
    "RUN_EVAL": "false",
}
# Commands the scripts run that start servers.
SERVER_COMMANDS = ("vllm", "sglang", "trtllm-serve", "python3", "python")
SERVER_MODULES = (
    "sglang.launch_server",
    "atom.entrypoints.openai_server",
    "vllm.entrypoints.openai.api_server",
)
# Commands that must not touch this machine, its packages or the network: stubs that do nothing.
INERT_COMMANDS = (
    *("nvidia-smi", "amd-smi", "pip", "pip3", "uv", "docker", "apt"),
    *("apt-get", "curl", "wget", "git", "ssh", "scp", "rsync", "nc", "sudo"),
    # waits (for a download retry, a GPU's memory, a side service): nothing to wait for under the stubs;
    # the machine's name and free space (a script's message may hold the one, a guard reads the other: the
    # capture stays the same on every machine, the guard passing as on upstream's nodes)
    *("sleep", "flock", "hostname", "df"),
)
# Machine tools whose answers the scripts act on (machine.sh): rocm-smi reports an idle AMD node (the scripts
# wait for the GPUs' memory to drain and read the firmware), hf "downloads" a complete checkpoint (the scripts
# check the shards are there). They reach nothing outside the sandbox.
MACHINE_COMMANDS = ("rocm-smi", "hf", "huggingface-cli")
# Paths of the machine and the image the scripts read or edit, rewritten into the sandbox's machine/ (as
# /workspace is into its workspace/), with the files an upstream node has there: an active RDMA port (the
# Mooncake scripts pick the first rail whose port is ACTIVE) and SGLang's multi-tokenizer source (which the
# SGLang scripts patch with sed), a stand-in holding the lines the patch looks for.
MACHINE_ROOTS = ("/sys/class/infiniband", "/sgl-workspace", "/tmp/k3_embed")
# The image's Python packages, as a script that asks where one is installed sees them (`python -c` with
# importlib's find_spec: apply_k3_container_patches.sh patches vLLM's and AITER's files there): empty
# stand-ins in the sandbox, never this machine's packages.
PACKAGES = "usr/local/lib/python3/dist-packages"
MACHINE_FILES = {
    "sys/class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n",
    # vLLM's Python package is named as the engine; AITER is AMD's kernel library
    **{f"{PACKAGES}/{name}/__init__.py": "" for name in (Engine.VLLM.value, "aiter")},
    "sgl-workspace/sglang/python/sglang/srt/managers/multi_tokenizer_mixin.py": (
        "# servelab's stand-in for SGLang's multi_tokenizer_mixin.py: the lines the scripts' sed reads\n"
        "def _handle_output_by_index(output, i):\n"
        "    if False:\n"
        "        pass\n"
        "    elif isinstance(output, BatchStrOutput):\n"
        "        return BatchStrOutput(\n"
        '            cached_tokens=_extract_field_by_index(output, "cached_tokens", i),\n'
        '            input_token_logprobs_val=_extract_field_by_index(output, "logprobs", i),\n'
        "        )\n"
    ),
}
MACHINE = "machine"
# Side services the agentic scripts start beside the server (KV-offload stores): stubs that stay up a moment,
# as the scripts check they did not die at once (`kill -0`), and start nothing.
SIDE_SERVICES = ("mooncake_master",)
WORKSPACE = "/workspace"
TIMEOUT_S = 60.0
# Variables the sandbox sets, and those bash sets: not what the script added.
SHELL_VARS = ("PWD", "OLDPWD", "SHLVL", "_")


class CaptureError(Exception):
    """The sandbox could not run a script at all (no bash on this machine)."""


def script_for(entry, spec: str, available: set[str], scenario: str = "fixed-seq-len") -> str | None:
    """The script InferenceX's launchers run for a key (an InferenceX master entry or a servelab recipe:
    model prefix, precision, runner, framework) in a scenario (`fixed-seq-len`, `agentic-coding`): the
    framework-tagged name if it exists, else the historical one (`_trt` / `_atom` suffix for those
    frameworks, none for the others)."""
    gpu = entry.runner.removeprefix("cluster:").split("-", 1)[0]
    base = f"{SCENARIO_DIRS[scenario]}/{entry.model_prefix}_{entry.precision}_{gpu}"
    mtp = "_mtp" if spec == "mtp" else ""
    legacy = {"trt": "_trt", "atom": "_atom"}.get(entry.framework, "")
    for name in (f"{base}_{entry.framework}{mtp}.sh", f"{base}{legacy}{mtp}.sh"):
        if name in available:
            return name
    return None


def scripts_in(benchmarks: Path) -> set[str]:
    """The launch scripts of a benchmarks/ directory (both scenarios), relative to it."""
    roots = [benchmarks / d for d in SCENARIO_DIRS.values() if (benchmarks / d).is_dir()]
    return {p.relative_to(benchmarks).as_posix() for root in roots for p in root.rglob("*.sh")}


def _layout_env(
    *,
    model: str,
    model_prefix: str,
    precision: str,
    framework: str,
    image: str,
    tp: int,
    pp: int,
    dcp: int,
    pcp: int,
    ep: int,
    dp_attn: bool,
    conc: int,
    spec: str,
    exp_name: str,
) -> dict[str, str]:
    """What InferenceX's benchmark template gives every single-node job's script: the model, the image and
    the parallel layout at one concurrency."""
    return {
        **BASE_ENV,
        "MODEL": model,
        "MODEL_PREFIX": model_prefix,
        "PRECISION": precision,
        "FRAMEWORK": framework,
        "IMAGE": image,
        "TP": str(tp),
        "PP_SIZE": str(pp),
        "DCP_SIZE": str(dcp),
        "PCP_SIZE": str(pcp),
        "EP_SIZE": str(ep),
        "DP_ATTENTION": "true" if dp_attn else "false",
        "CONC": str(conc),
        "SPEC_DECODING": spec,
        "EXP_NAME": exp_name,
    }


def job_env(*, isl: int, osl: int, max_model_len: int, **layout) -> dict[str, str]:
    """The environment InferenceX's benchmark template gives a single-node job's launch script: the layout
    (`_layout_env`'s keywords) and the sequence lengths."""
    return {**_layout_env(**layout), "ISL": str(isl), "OSL": str(osl), "MAX_MODEL_LEN": str(max_model_len)}


# InferenceX's benchmark template gives agentic jobs these (.github/workflows/benchmark-tmpl.yml): the
# results under /workspace, the scenario, and the replay's duration from the row.
AGENTIC_BASE_ENV = {
    "RESULT_DIR": f"{WORKSPACE}/results",
    "SCENARIO_TYPE": "agentic-coding",
    "SCENARIO_SUBDIR": "agentic/",
    "IS_AGENTIC": "1",
    "EVAL_ONLY": "false",
}


def agentic_job_env(
    *,
    kv_offloading: str,
    kv_offload_backend: dict | None,
    total_cpu_dram_gb: int,
    duration: int,
    **layout,
) -> dict[str, str]:
    """The environment InferenceX's benchmark template gives a single-node agentic-coding job's script: the
    layout (`_layout_env`'s keywords), no sequence lengths (trace replay), and the row's KV offload settings:
    KV_OFFLOADING, KV_OFFLOAD_BACKEND (the backend's name, empty without offload), TOTAL_CPU_DRAM_GB (the DRAM
    budget, matrix.py `dram_offload_gb`) and DURATION. (The template's KV_OFFLOAD_BACKEND_METADATA, the
    backend as JSON, is read by no script nor by benchmark_lib.sh.)"""
    return {
        **_layout_env(**layout),
        **AGENTIC_BASE_ENV,
        "KV_OFFLOADING": kv_offloading,
        "KV_OFFLOAD_BACKEND": kv_offload_backend["name"] if kv_offload_backend else "",
        "TOTAL_CPU_DRAM_GB": str(total_cpu_dram_gb),
        "DURATION": str(duration),
    }


def stub_sources() -> dict[str, bytes]:
    """The stubs the sandbox installs, by name (their content is part of what a cached capture depends on)."""
    package = resources.files(__package__)
    names = ("benchmark_lib.sh", "stub_server.py", "machine.sh")
    return {name: (package / name).read_bytes() for name in names}


class Sandbox:
    """A directory to run launch scripts in (a context manager: made on entry, removed on exit): the stub
    benchmark_lib.sh, the chat templates of `benchmarks` (files the scripts hand to the servers), and a bin/
    that goes first on PATH with the stubs. `run` copies one script of `benchmarks` in and runs it."""

    def __init__(self, benchmarks: Path, timeout_s: float | None = None):
        self.benchmarks = Path(benchmarks)
        self.timeout_s = timeout_s or TIMEOUT_S
        self._tmp: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> Sandbox:
        self._tmp = tempfile.TemporaryDirectory(prefix="servelab-capture-")
        tmp = self.root
        bin_dir, bench = tmp / "bin", tmp / "benchmarks"
        bin_dir.mkdir()
        (bench / SCENARIO_DIR).mkdir(parents=True)
        (tmp / "workspace").mkdir()
        stubs = stub_sources()
        (bench / "benchmark_lib.sh").write_bytes(stubs["benchmark_lib.sh"])
        if (self.benchmarks / TEMPLATES).is_dir():
            shutil.copytree(self.benchmarks / TEMPLATES, bench / TEMPLATES)
        (tmp / "stub_server.py").write_bytes(stubs["stub_server.py"])
        config = {
            "servers": SERVER_COMMANDS,
            "modules": SERVER_MODULES,
            "capture": str(self.capture),
            "packages": str(tmp / MACHINE / PACKAGES),
        }
        (tmp / "stub.json").write_text(json.dumps(config))
        server = '#!/bin/sh\nexec {} -I {} {} "$0" "$@"\n'.format(
            *map(shlex.quote, (sys.executable, str(tmp / "stub_server.py"), str(tmp / "stub.json")))
        )
        for name in (*SERVER_COMMANDS, "mpirun"):
            executable(bin_dir / name, server)
        for name in INERT_COMMANDS:
            executable(bin_dir / name, "#!/bin/sh\nexit 0\n")
        for name in MACHINE_COMMANDS:
            executable(bin_dir / name, "#!/bin/sh\n" + stubs["machine.sh"].decode())
        for rel, content in MACHINE_FILES.items():
            (tmp / MACHINE / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / MACHINE / rel).write_text(content)
        for name in SIDE_SERVICES:
            executable(bin_dir / name, "#!/bin/sh\nexec /bin/sleep 1\n")
        return self

    def __exit__(self, *exc) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @property
    def root(self) -> Path:
        if self._tmp is None:
            raise RuntimeError("Sandbox is used outside its `with` block")
        return Path(self._tmp.name)

    @property
    def capture(self) -> Path:
        return self.root / "capture.jsonl"

    def run(self, script: str, env: dict[str, str]) -> dict:
        """Run `script` (relative to benchmarks/) for one job: the server launch it makes (`argv`, the `env`
        it added, the `files` its argv names, the client's arguments as `bench`) or why there is none
        (`refused`: the script's last line of output, its exit status or the time limit; `timeout`: true when
        it ran out of time)."""
        tmp = self.root
        bench, work = tmp / "benchmarks", tmp / "work"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        for name in (script, *siblings(self.benchmarks, script)):
            text = (self.benchmarks / name).read_text().replace(WORKSPACE, str(tmp / "workspace"))
            for root in MACHINE_ROOTS:
                text = text.replace(root, str(tmp / MACHINE) + root)
            (bench / name).parent.mkdir(parents=True, exist_ok=True)
            (bench / name).write_text(text)
        self.capture.unlink(missing_ok=True)
        bench_args = tmp / "bench.args"
        bench_args.unlink(missing_ok=True)
        base = {
            "PATH": f"{tmp / 'bin'}:/usr/bin:/bin",
            "HOME": str(tmp),
            "SERVELAB_BENCH_CAPTURE": str(bench_args),
            # the job's /workspace (an agentic job's RESULT_DIR) is the sandbox's, as in the script's text
            **{k: v.replace(WORKSPACE, str(tmp / "workspace")) for k, v in env.items()},
        }
        done = _run(["bash", str(bench / script)], work, base, self.timeout_s)
        if done is None:
            return {"refused": [f"timed out after {self.timeout_s:g} s"], "timeout": True}
        out, err, code = done
        lines = self.capture.read_text().splitlines() if self.capture.exists() else []
        if not lines:
            return {"refused": [_upstream_path(_last_words(out + err, code), tmp)]}
        got = json.loads(lines[0])
        skip = set(base) | set(SHELL_VARS)
        added = {k: _upstream_path(v, tmp) for k, v in got["env"].items() if k not in skip}
        files = {Path(p).name: c for p, c in got["files"].items()}
        argv = [_upstream_path(a, tmp) for a in got["argv"]]
        found: dict = {"argv": argv, "env": dict(sorted(added.items())), "files": files}
        # run_benchmark_serving's arguments (the stub benchmark_lib.sh writes them NUL-separated)
        if bench_args.exists():
            args = [_upstream_path(a, tmp) for a in bench_args.read_text().split("\0")[:-1]]
            # the stub server's process id differs run to run: recorded as the variable upstream passes
            before = ["", *args[:-1]] if args else []
            found["bench"] = [
                "$SERVER_PID" if b == "--server-pid" else a for b, a in zip(before, args, strict=True)
            ]
        return found


def siblings(benchmarks: Path, script: str) -> list[str]:
    """The scripts beside `script` (relative to benchmarks/) that it names, which it runs
    (`bash "$(dirname "$0")/apply_k3_container_patches.sh"`)."""
    path = benchmarks / script
    text = path.read_text()
    return sorted(
        (path.parent / p.name).relative_to(benchmarks).as_posix()
        for p in path.parent.glob("*.sh")
        if p.name != path.name and f"/{p.name}" in text
    )


def _last_words(output: str, code: int) -> str:
    """Why a script launched no server: the last line it said, not bash's trace of a command (`set -x`
    lines start with +); with none, the last command it traced (the stub library's exit `wait` aside)."""
    said = output.strip().splitlines()
    plain = [line for line in said if not line.startswith("+")]
    if plain:
        return plain[-1]
    traced = [line.lstrip("+ ") for line in said if line.lstrip("+ ") != "wait"]
    return f"exit {code} after `{traced[-1]}`" if traced else f"exit {code}"


def executable(path: Path, text: str) -> None:
    """A script written at `path`, executable (a stub of a command the scripts call)."""
    path.write_text(text)
    path.chmod(0o755)


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float) -> tuple[str, str, int] | None:
    """stdout, stderr and exit status of a command in its own process group, or None when it ran out of time
    (then the group is killed: a server stub left in the background, a `sleep` the script started)."""
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise CaptureError("bash is not installed; launch scripts run under bash") from None
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        proc.communicate()
        return None
    _kill_group(proc.pid)  # what the script left running in the background
    return out, err, proc.returncode


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _upstream_path(value: str, tmp: Path) -> str:
    """Sandbox paths in a value as upstream has them: /workspace/..., paths in the job's directory relative,
    files of the scripts' tree as InferenceX repository paths (benchmarks/single_node/chat_templates/...)."""

    def upstream(match: re.Match) -> str:
        rel = os.path.relpath(os.path.normpath(match.group(0)), tmp)
        if rel == "workspace" or rel.startswith("workspace/"):
            return "/" + rel
        if rel.startswith(MACHINE + "/"):
            return rel.removeprefix(MACHINE)
        return rel.removeprefix("work/")

    return re.sub(re.escape(str(tmp)) + r"[^\s\"',=:]*", upstream, value)
