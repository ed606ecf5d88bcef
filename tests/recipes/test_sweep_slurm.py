"""`servelab sweep --format slurm`: single-node jobs as one array job whose task N runs job N exactly as the
sh format's script runs it (under a stub srun that records its argv and environment), a job's deployment as
one sbatch script with an srun per process on its node (under stub srun, scontrol and curl), every value
quoted and every option checked."""

import gzip
import json
import os
import re
import shlex
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from clirun import servelab
from pinned import pinned_jobs
from pydantic import ValidationError
from typer.testing import CliRunner

from servelab.cli.main import app
from servelab.errors import ServelabError
from servelab.recipes import slurm
from servelab.recipes.emit import emit
from servelab.recipes.filters import Filters
from servelab.recipes.matrix import arm_settings
from servelab.recipes.pipelines import JOB_FILE, run_argv, script, script_names
from servelab.recipes.recipe_store import open_store
from servelab.recipes.slurm import SlurmOptions, deployment_refusal, multinode_script, slurm_scripts
from servelab.recipes.srtslurm_jobs import choice_key
from servelab.recipes.sweep import expand

IX = Path(__file__).parents[1] / "data" / "inferencex" / "configs"
TRACE = IX.parent / "agentic" / "traces.jsonl"  # the trace an agentic job's script checks for
MARKER = "PWNED"
HOSTILE = [
    f"x; touch {MARKER}",
    f"$(touch {MARKER})",
    f"`touch {MARKER}`",
    f"x' ; touch {MARKER}; '",
    f'x" ; touch {MARKER}; "',
    f"a,b=c ${{HOME}} # touch {MARKER}",
]

# Stand in for srun (record argv, working directory and environment, then run the command after srun's
# options) and for servelab (record the same and the job file it was given). NUL-separated, as argv is.
SRUN = """#!/usr/bin/env bash
log="$STUB_LOG/srun-$$"
printf '%s\\0' "$@" > "$log.argv"; pwd > "$log.cwd"; env -0 > "$log.env"
while [[ $# -gt 0 && $1 == -* ]]; do shift; done
exec "$@"
"""
SERVELAB = """#!/usr/bin/env bash
for f in $STUB_WAIT; do while [[ ! -e $STUB_LOG/$f ]]; do sleep 0.05; done; done  # a health gate
# a deployment's sruns all up (their stop trap set) before the job's script goes on to stop them
for ((i = 0; i < 600; i++)); do
  (($(compgen -G "$STUB_LOG/srun-*.ready" | wc -l) >= ${STUB_READY:-0})) && break
  sleep 0.05
done
log="$STUB_LOG/servelab-${STUB_NAME:-$SLURM_ARRAY_TASK_ID}"
printf '%s\\0' "$@" > "$log.argv"; pwd > "$log.cwd"; env -0 > "$log.env"; cp servelab-job.json "$log.json"
"""
# a server of a deployment: records its call, runs until stopped, and records that it was stopped
SERVER = """#!/usr/bin/env bash
log="$STUB_LOG/$(basename "$0")"
trap 'kill $! 2>/dev/null; touch "$log.stopped"; exit 0' TERM
sleep 120 &
printf '%s\\0' "$@" > "$log.argv"; env -0 > "$log.env"; touch "$log.ready"
wait
"""


@pytest.fixture(scope="module")
def ix_jobs():
    """Single-node jobs of the pinned InferenceX sweep that servelab runs: three engines, 2-8 GPUs, agentic
    trace replays among them."""
    store = open_store(IX)
    jobs = expand(store, [], Filters(node_type="single-node", seq_lens=["8k1k"], lowest_conc=True))
    return [j for j in jobs if j.unrunnable is None]


@pytest.fixture
def stubs(tmp_path) -> dict:
    bindir, log = tmp_path / "bin", tmp_path / "log"
    bindir.mkdir()
    log.mkdir()
    for name, body in (
        ("srun", SRUN),
        ("servelab", SERVELAB),
        ("prefill", SERVER),
        ("decode", SERVER),
        ("router", SERVER),
    ):
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "STUB_LOG": str(log),
        "SERVELAB_AGENTIC_TRACE": str(TRACE),
    }
    return {**os.environ, **env}


def _log(env: dict) -> Path:
    return Path(env["STUB_LOG"])


def _argv(path: Path) -> list[str]:
    return path.read_bytes().decode().split("\0")[:-1]


def _env(path: Path) -> dict[str, str]:
    pairs = (e.split("=", 1) for e in path.read_bytes().decode().split("\0")[:-1])
    return {
        k: v for k, v in pairs if k not in ("PWD", "OLDPWD", "_", "SHLVL", "SLURM_ARRAY_TASK_ID", "STUB_NAME")
    }


def _syntax(text: str) -> None:
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def _syntax_all(texts: list[str], folder: Path) -> None:
    """`bash -n` on each script, started from one bash (a Python subprocess a script costs 10 ms, 4 s for the
    pinned sweep's 547)."""
    folder.mkdir()
    paths = []
    for i, text in enumerate(texts):
        paths.append(folder / f"{i}.sh")
        paths[-1].write_text(text)
    loop = 'for f; do bash -n "$f" || echo "$f"; done'
    r = subprocess.run(["bash", "-c", loop, "bash", *map(str, paths)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "", f"bash -n refuses {r.stdout.split()}: {r.stderr}"


def directives(text: str) -> list[str]:
    """The options sbatch reads from a script: #SBATCH lines before the first command, split with
    shell-like quoting, an unquoted # starting a comment."""
    args = []
    for line in text.splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        if line.startswith("#SBATCH"):
            args += shlex.split(line.removeprefix("#SBATCH"), comments=True)
    return args


def _bash(text: str, cwd: Path, env: dict, **extra: str) -> subprocess.CompletedProcess:
    """Run a script from a file (as sbatch does: an array script is larger than one argument may be)."""
    cwd.mkdir(exist_ok=True)
    path = cwd.parent / f"{cwd.name}.script"
    path.write_text(text)
    return subprocess.run(
        ["bash", str(path)], cwd=cwd, env={**env, **extra}, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow  # 2.1 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_array_script_directives(ix_jobs):
    [(name, text)] = slurm_scripts(ix_jobs, SlurmOptions()).items()
    _syntax(text)
    assert name == "array.sbatch" and len(ix_jobs) > 100
    assert {j.point.framework for j in ix_jobs} == {"vllm", "sglang", "trt", "atom"}
    assert directives(text) == [
        "--job-name=servelab-sweep",
        f"--array=0-{len(ix_jobs) - 1}",
        "--nodes=1",
        "--ntasks=1",
        "--gpus-per-node=8",  # the largest job's tp x pp; tasks run on whole nodes
        "--exclusive",
        "--time=3:00:00",
        "--output=%x-%A_%a.out",
        "--error=%x-%A_%a.err",
    ]


@pytest.mark.slow  # every array task under bash: about 7 s
def test_each_task_runs_the_sh_scripts_launch(ix_jobs, stubs, tmp_path):
    """Every array task runs, under srun, the `servelab run --job` the job's sh script runs, on the same job
    file and environment, in a folder of its own."""
    jobs = ix_jobs
    text = slurm_scripts(jobs, SlurmOptions())["array.sbatch"]
    names = [n.removesuffix(".sh") for n in script_names(jobs)]
    log = _log(stubs)
    first, last = directives(text)[1].removeprefix("--array=").split("-")
    tasks = range(int(first), int(last) + 1)  # the task ids sbatch gives the array
    assert len(tasks) == len(jobs)
    assert any(j.scenario == "agentic-coding" for j in jobs)
    for i, job in zip(tasks, jobs, strict=True):
        r = _bash(text, tmp_path / "submit", stubs, SLURM_ARRAY_TASK_ID=str(i))
        assert r.returncode == 0, r.stderr
        [srun] = log.glob("srun-*.argv")
        assert ["srun", *_argv(srun)] == [*slurm.SRUN_ONE, *run_argv(job)]
        assert srun.with_suffix(".cwd").read_text().strip() == str(tmp_path / "submit" / names[i])
        srun.unlink()

        r = _bash(script(job), tmp_path / f"sh{i}", stubs, STUB_NAME="sh")
        assert r.returncode == 0, r.stderr
        task, sh = log / f"servelab-{i}", log / "servelab-sh"
        assert ["servelab", *_argv(Path(f"{task}.argv"))] == run_argv(job)
        assert _argv(Path(f"{task}.argv")) == _argv(Path(f"{sh}.argv"))
        assert Path(f"{task}.json").read_bytes() == Path(f"{sh}.json").read_bytes()
        assert _env(Path(f"{task}.env")) == _env(Path(f"{sh}.env"))
    assert sorted(p.name for p in (tmp_path / "submit").iterdir()) == sorted(names)


def test_a_task_past_the_array_runs_nothing(ix_jobs, stubs, tmp_path):
    text = slurm_scripts(ix_jobs[:3], SlurmOptions())["array.sbatch"]
    r = _bash(text, tmp_path / "w", stubs, SLURM_ARRAY_TASK_ID="3")
    assert r.returncode == 2 and "no job for array task 3 (0-2)" in r.stderr
    r = _bash(text, tmp_path / "w", stubs)  # not under sbatch
    assert r.returncode != 0 and "SLURM_ARRAY_TASK_ID" in r.stderr
    assert not list(_log(stubs).iterdir())


def test_options_become_quoted_directives(ix_jobs, stubs, tmp_path):
    hostile = f"--comment=a b; $(touch {MARKER}) # x"
    opts = SlurmOptions(
        partition="gpu,gpu-long", account="perf.team", time="1-12:00", sbatch_arg=["--qos=high", hostile]
    )
    text = slurm_scripts(ix_jobs[:2], opts)["array.sbatch"]
    _syntax(text)
    args = directives(text)
    assert args[6:10] == ["--time=1-12:00", "--partition=gpu,gpu-long", "--account=perf.team", "--qos=high"]
    assert args[10] == hostile  # one argument, as sbatch reads it
    r = _bash(text, tmp_path / "w", stubs, SLURM_ARRAY_TASK_ID="1")
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "w" / MARKER).exists() and not list(tmp_path.rglob(MARKER))


@pytest.mark.parametrize(
    "fields, option",
    [
        ({"partition": "gpu long"}, "partition"),
        ({"partition": "gpu\n#SBATCH --x"}, "partition"),
        ({"partition": "gpu;id"}, "partition"),
        ({"account": "a\rb"}, "account"),
        ({"account": "$(id)"}, "account"),
        ({"time": "3 hours"}, "time"),
        ({"time": "3:00:00\ntouch x"}, "time"),
        ({"sbatch_arg": ["-p gpu"]}, "sbatch_arg"),
        ({"sbatch_arg": ["--qos=a\nb"]}, "sbatch_arg"),
        ({"sbatch_arg": ["--qos=a\u2028b"]}, "sbatch_arg"),
        ({"sbatch_arg": ["--array=0-9"]}, "sbatch_arg"),
        ({"sbatch_arg": ["--partition=x"]}, "sbatch_arg"),
    ],
)
def test_bad_options_are_refused(fields, option):
    with pytest.raises(ValidationError) as info:
        SlurmOptions(**fields)
    assert [e["loc"][0] for e in info.value.errors()] == [option]


def test_cli_writes_the_array_to_a_directory(tmp_path):
    r = CliRunner().invoke(
        app,
        ["sweep", "dsv4-fp4-b200-vllm", "--seq-lens", "8k1k", "--format", "slurm", "--out", str(tmp_path)],
    )
    assert r.exit_code == 0, r.output
    assert r.stdout == f"{tmp_path / 'array.sbatch'}\n" and os.access(tmp_path / "array.sbatch", os.X_OK)
    r = CliRunner().invoke(app, ["sweep", "dsv4-fp4-b200-vllm", "--seq-lens", "8k1k", "--format", "slurm"])
    assert r.exit_code == 0 and r.stdout == (tmp_path / "array.sbatch").read_text()


def test_a_large_sweep_is_split_into_arrays(ix_jobs, tmp_path, monkeypatch):
    monkeypatch.setattr(slurm, "MAX_ARRAY_TASKS", 50)
    listing = emit(ix_jobs, "slurm", tmp_path).split()
    parts = -(-len(ix_jobs) // 50)
    assert parts >= 3
    assert [Path(p).name for p in listing] == [f"array-{n}.sbatch" for n in range(1, parts + 1)]
    texts = [Path(p).read_text() for p in listing]
    assert [directives(t)[1] for t in texts] == ["--array=0-49"] * (parts - 1) + [
        f"--array=0-{len(ix_jobs) - 50 * (parts - 1) - 1}"
    ]
    # job 50 is the second array's task 0
    assert f"cd -- {script_names(ix_jobs)[50].removesuffix('.sh')}\n" in texts[1].split("\n1)\n")[0]
    with pytest.raises(ServelabError, match=f"{parts} scripts need an output directory"):
        emit(ix_jobs, "slurm")


def test_jobs_without_a_launch_are_refused_in_one_line():
    # the pinned sweep, expanded once a test process
    multi = [j for j in pinned_jobs() if j.point.multinode]
    # a multinode job on a fork of srt-slurm servelab has no copy of (no pinned job keeps the "disaggregated
    # arms ... not rendered yet" reason any more: TileRT's and llm-d's deploy too)
    multi = [j for j in multi if (j.not_renderable or "").startswith("srt-slurm: srt-slurm https://")][:1]
    assert multi
    with pytest.raises(ServelabError) as info:
        emit(multi, "slurm")
    assert "no script can be written: srt-slurm: srt-slurm https://" in str(info.value)
    assert "\n" not in str(info.value)


def test_hostile_recipe_values_arrive_as_written(store_dir, stubs, tmp_path):
    p = store_dir / "recipes" / "b200.yaml"
    data = yaml.safe_load(p.read_text())
    data["dsv4f-fp8-b200-vllm"]["engine"]["extra-args"] = [
        a for v in HOSTILE for a in ("--served-model-name", v)
    ]
    data["dsv4f-fp8-b200-vllm"]["env"] = {f"VLLM_HOSTILE_{i}": v for i, v in enumerate(HOSTILE)}
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    jobs = expand(open_store(store_dir), ["dsv4f-fp8-b200-vllm"], Filters(mode="test-config", conc=[1, 64]))
    text = slurm_scripts(jobs, SlurmOptions())["array.sbatch"]
    _syntax(text)
    for i, job in enumerate(jobs):
        assert all(v in job.launch.argv and v in job.launch.env.values() for v in HOSTILE)
        r = _bash(text, tmp_path / "w", stubs, SLURM_ARRAY_TASK_ID=str(i))
        assert r.returncode == 0, r.stderr
        written = (_log(stubs) / f"servelab-{i}.json").read_text()
        assert written == (tmp_path / "w" / script_names(jobs)[i].removesuffix(".sh") / JOB_FILE).read_text()
        launch = yaml.safe_load(written)["launch"]
        assert launch == job.launch.model_dump()
    assert not list(tmp_path.rglob(MARKER))


# Stand-ins for a deployment's script: scontrol lists $STUB_NODES (a name a line); srun records its argv
# and runs (as the process it starts) until stopped, recording that; srun of a program named in $STUB_DIE
# exits at once; curl records the URL and answers as $STUB_CURL says (0: healthy).
DEPLOY_SRUN = """#!/usr/bin/env bash
log="$STUB_LOG/srun-$$"
trap 'kill $! 2>/dev/null; touch "$log.stopped"; exit 0' TERM
printf '%s\\0' "$@" > "$log.argv"; pwd > "$log.cwd"
for a in "$@"; do [[ -n ${STUB_DIE:-} && $a == "$STUB_DIE" ]] && exit 9; done
sleep 120 &
touch "$log.ready"
wait
"""
SCONTROL = """#!/usr/bin/env bash
printf '%s\\0' "$@" > "$STUB_LOG/scontrol.argv"
printf '%s\\n' "$STUB_NODES"
"""
CURL = """#!/usr/bin/env bash
printf '%s\\n' "${@: -1}" >> "$STUB_LOG/curl.urls"
exit "${STUB_CURL:-0}"
"""
NODES = ["gpu-a01", "gpu-a02", "gpu-b17"]
ROLE_ORDER = ["side", "prefill", "decode", "worker", "router"]


@pytest.fixture(scope="module")
def deployment_jobs():
    """The pinned sweep's runnable jobs that carry a deployment."""
    return [j for j in pinned_jobs() if j.deployment is not None and j.unrunnable is None]


@pytest.fixture
def dstubs(stubs) -> dict:
    bindir = Path(stubs["PATH"].split(":")[0])
    for name, body in (("srun", DEPLOY_SRUN), ("scontrol", SCONTROL), ("curl", CURL)):
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    return {**stubs, "SLURM_JOB_NODELIST": "gpu-a[01-02],gpu-b17", "STUB_NODES": "\n".join(NODES)}


@pytest.mark.slow  # 3.7 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_every_deployment_of_the_pinned_sweep_gets_a_script(deployment_jobs, tmp_path):
    """bash -n on every script; an srun per process, but one per MPI group (TensorRT-LLM's endpoints)."""
    written, mpi, texts = 0, 0, []
    for job in deployment_jobs:
        assert deployment_refusal(job) is None
        dep = job.deployment
        text = multinode_script(job, "x", SlurmOptions())
        texts.append(text)
        assert directives(text)[1] == f"--nodes={dep.nodes}"
        ranks = sum(len(m) - 1 for m in dep.mpi_groups().values())  # started by their group's srun
        assert text.count("srun ") == len(dep.processes) - ranks
        frontends = sum(" ".join(p.argv).count("-m dynamo.frontend") for p in dep.processes)
        assert text.count("--mpi=pmix") == len(dep.mpi_groups()) + frontends
        written += 1
        mpi += bool(dep.mpi_groups())
    _syntax_all(texts, tmp_path / "scripts")
    # 48: InferenceX's AMD sglang-disagg and atom-disagg jobs (12 of them agentic), 2: its TileRT ones, 3: its
    # llm-d ones; 171 and 19: srt-slurm's multinode agentic jobs, which replay their trace at each
    # concurrency; 155 + 19: dynamo-trt's, their workers MPI groups
    assert (written, mpi) == (149 + 48 + 2 + 3 + 171 + 155 + 19, 155 + 19)


def test_a_tensorrt_llm_process_outside_an_mpi_group_is_refused_in_one_line(deployment_jobs):
    job = next(j for j in deployment_jobs if j.deployment.mpi_groups())
    procs = [p.model_copy(update={"mpi_group": None}) for p in job.deployment.processes]
    job = job.model_copy(update={"deployment": job.deployment.model_copy(update={"processes": procs})})
    with pytest.raises(ServelabError, match="no script can be written: its TensorRT-LLM") as info:
        multinode_script(job, "x", SlurmOptions())
    assert "mpi_group" in str(info.value) and "\n" not in str(info.value)


def _two_node_job(deployment_jobs):
    """A pinned dynamo-sglang job over two nodes with nginx in front of two frontends (its nginx.conf names
    node 1's frontend)."""
    return next(
        j
        for j in deployment_jobs
        if j.deployment.nodes == 2 and "nginx.conf" in j.deployment.files and not j.deployment.mpi_groups()
    )


def _expected_sruns(dep, nodes: list[str]) -> list[list[str]]:
    """What each srun is asked, in start order, the placeholders replaced by the node names."""

    def sub(text: str) -> str:
        for n, name in enumerate(nodes):
            text = text.replace(f"{{{{node:{n}}}}}", name)
        return text

    procs = sorted(dep.processes, key=lambda p: ROLE_ORDER.index(p.role))  # stable: list order within a role
    out = []
    for p in procs:
        env = ["env", *(sub(f"{k}={v}") for k, v in p.env.items())] if p.env else []
        mpi = ["--mpi=pmix"] if "dynamo.frontend" in p.argv else []  # as srtctl starts Dynamo's frontend
        argv = [*slurm.SRUN_ONE, "--overlap", *mpi, f"--nodelist={nodes[p.node]}", *env, *map(sub, p.argv)]
        out.append(argv)
    return out


def _sruns(log: Path) -> list[list[str]]:
    """The sruns the stub recorded (started in the background: in no particular order)."""
    return [["srun", *_argv(p)] for p in log.glob("srun-*.argv")]


def _script_sruns(text: str, nodes: list[str]) -> list[list[str]]:
    """The srun lines of a script in the order it starts them, as bash would split them given `nodes`."""
    lines = [line.split(" < /dev/null")[0] for line in text.splitlines() if line.startswith("srun ")]
    return [
        [re.sub(r"\$\{nodes\[(\d+)\]\}", lambda m: nodes[int(m[1])], w) for w in shlex.split(line)]
        for line in lines
    ]


def _all_stopped(log: Path, but: str = "") -> bool:
    """Every process the stub srun ran (but the one named `but`, which ended itself) was stopped."""
    argvs = [p for p in log.glob("srun-*.argv") if not but or but not in _argv(p)]
    for _ in range(100):
        if all(p.with_suffix(".stopped").exists() for p in argvs):
            return True
        time.sleep(0.1)
    return False


def test_a_deployment_script_starts_each_process_on_its_node(deployment_jobs, dstubs, tmp_path):
    job = _two_node_job(deployment_jobs)
    dep = job.deployment
    text = slurm_scripts([job], SlurmOptions(partition="gpu"))
    [(file, text)] = text.items()
    name = script_names([job])[0].removesuffix(".sh")
    assert file == f"{name}.sbatch"
    args = directives(text)
    assert args[:5] == [
        f"--job-name=servelab-{job.key}",
        "--nodes=2",
        "--ntasks-per-node=1",
        f"--gpus-per-node={max(sum(p.gpus for p in dep.processes if p.node == n) for n in (0, 1))}",
        "--exclusive",
    ]
    ready = str(len(dep.processes))
    r = _bash(text, tmp_path / "submit", dstubs, STUB_NAME="driver", STUB_READY=ready)
    assert r.returncode == 0, r.stderr
    log, folder = _log(dstubs), tmp_path / "submit" / name
    assert _argv(log / "scontrol.argv") == ["show", "hostnames", "gpu-a[01-02],gpu-b17"]
    sruns = _sruns(log)
    expected = _expected_sruns(dep, NODES)
    assert sorted(sruns) == sorted(expected)
    # side processes first, then prefill and decode, the frontends last
    assert _script_sruns(text, NODES) == expected
    assert expected[0][5:] == ["nats-server", "-js"] and expected[1][5] == "etcd"
    assert all(
        Path(p.with_suffix(".cwd")).read_text().strip() == str(folder) for p in log.glob("srun-*.argv")
    )
    assert not any("{{node" in a for s in sruns for a in s)
    # the files, node 1's name in nginx.conf; the logs beside them
    conf = (folder / "nginx.conf").read_text()
    assert conf == dep.files["nginx.conf"].replace("{{node:1}}", NODES[1]) and NODES[1] in conf
    assert (folder / slurm.LOG_DIR).is_dir()
    # etcd's health, then the endpoint's (nginx on node 0), then the job's servelab run attached to it
    front = dep.processes[dep.endpoint]
    urls = (log / "curl.urls").read_text().split()
    assert urls == [f"http://{NODES[0]}:2379/health", f"http://{NODES[front.node]}:{front.port}/health"]
    driver = log / "servelab-driver"
    assert ["servelab", *_argv(Path(f"{driver}.argv"))] == [
        *run_argv(job),
        "--base-url",
        f"http://{NODES[front.node]}:{front.port}",
    ]
    assert Path(f"{driver}.json").read_text() == (folder / JOB_FILE).read_text()
    assert Path(f"{driver}.cwd").read_text().strip() == str(folder)
    assert _all_stopped(log), "a process was left running after the script ended"


def _mpi_job(deployment_jobs):
    """The pinned dynamo-trt job on the fewest nodes with a TensorRT-LLM endpoint over several nodes."""
    jobs = [j for j in deployment_jobs if any(len(m) > 1 for m in j.deployment.mpi_groups().values())]
    return min(jobs, key=lambda j: j.deployment.nodes)


def _srun_words(line: str, nodes: list[str]) -> list[str]:
    """An srun line of a script as bash splits it, node N's name for each `${nodes[N]}`."""
    line = line.split(" < /dev/null")[0]
    return [re.sub(r"\$\{nodes\[(\d+)\]\}", lambda m: nodes[int(m[1])], w) for w in shlex.split(line)]


def test_tensorrt_llm_ranks_start_as_one_mpi_srun_per_endpoint(deployment_jobs, dstubs, tmp_path):
    job = _mpi_job(deployment_jobs)
    dep = job.deployment
    groups = list(dep.mpi_groups().values())
    names = [f"gpu-c{i:02d}" for i in range(dep.nodes)]
    env = {**dstubs, "STUB_NODES": "\n".join(names), "SLURM_JOB_NODELIST": f"gpu-c[00-{dep.nodes - 1:02d}]"}
    text = multinode_script(job, "m", SlurmOptions())
    # the job's tasks per node: a rank per GPU, as srtctl's own job script asks for TensorRT-LLM
    per_node = max(dep.processes[m[0]].gpus for m in groups)
    assert directives(text)[1:3] == [f"--nodes={dep.nodes}", f"--ntasks-per-node={per_node}"]
    singles = [p for p in dep.processes if p.mpi_group is None]
    r = _bash(text, tmp_path / "submit", env, STUB_NAME="driver", STUB_READY=str(len(singles) + len(groups)))
    assert r.returncode == 0, r.stderr

    def sub(value: str) -> str:
        return re.sub(r"\{\{node:(\d+)\}\}", lambda m: names[int(m[1])], value)

    expected = []
    for members in groups:
        ranks = [dep.processes[i] for i in members]
        k, g = len(ranks), ranks[0].gpus
        srun = ["srun", f"--nodes={k}", f"--ntasks={k * g}", f"--ntasks-per-node={g}", "--overlap"]
        srun += ["--mpi=pmix", "--oversubscribe", "--cpu-bind=verbose,none"]
        srun.append("--nodelist=" + ",".join(names[p.node] for p in ranks))
        expected.append([*srun, "env", *(sub(f"{n}={v}") for n, v in ranks[0].env.items()), *ranks[0].argv])
    sruns = _sruns(_log(env))
    assert sorted(s for s in sruns if "--oversubscribe" in s) == sorted(expected)
    assert any(len(m) > 1 for m in groups) and len(sruns) == len(singles) + len(groups)
    assert all(s[1:3] == ["--nodes=1", "--ntasks=1"] for s in sruns if "--oversubscribe" not in s)
    # each group's log named once, numbered within its role
    logs = re.findall(r"names\+=\((\S+)\)", text)
    roles = [dep.processes[m[0]].role for m in groups]
    assert [x for x in logs if x.startswith(("prefill", "decode", "worker"))] == [
        f"{role}-{sum(r == role for r in roles[:i])}" for i, role in enumerate(roles)
    ]
    assert _all_stopped(_log(env))


@pytest.mark.slow  # 1.1 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_tensorrt_llm_sruns_are_those_srtctl_starts_for_each_job(deployment_jobs):
    """For each dynamo-trt job, its script's worker sruns (nodes, tasks, tasks per node, MPI options, node
    list, argv) are those srtctl's own orchestrator started for its recipe (tests/data/srtslurm)."""
    captures = json.load(gzip.open(IX.parents[1] / "srtslurm" / "captures.json.gz"))
    jobs = [j for j in deployment_jobs if j.deployment.mpi_groups()]
    for job in jobs:
        capture = captures[choice_key(job.row, arm_settings(job.row)["CONFIG_FILE"])]
        log_dir = next(
            c["command"][c["command"].index("--log-dir") + 1]
            for c in capture["stages"]["start_head_infrastructure"]
        )
        names = [f"node{i:02d}" for i in range(capture["nodes"])]
        started = Counter()
        for call in capture["stages"]["start_all_workers"]:
            n, tasks = call["nodes"], call["ntasks"]
            options = (f"--nodes={n}", f"--ntasks={tasks}", f"--ntasks-per-node={tasks // n}")
            options += (f"--mpi={call['mpi']}", "--oversubscribe" * call["oversubscribe"])
            options += (f"--cpu-bind={call['cpu_bind']}", "--nodelist=" + ",".join(call["nodelist"]))
            started[(options, tuple(a.replace(log_dir, "/logs") for a in call["command"]))] += 1
        written = Counter()
        for line in multinode_script(job, "x", SlurmOptions()).splitlines():
            if line.startswith("srun ") and "--ntasks-per-node=" in line:
                words = _srun_words(line, names)
                options = tuple(w for w in words[1 : words.index("env")] if w != "--overlap")
                argv = words[words.index("env") + 1 :]
                argv = argv[next(i for i, w in enumerate(argv) if "=" not in w) :]
                written[(options, tuple(argv))] += 1
        assert written == started, job.label()
    assert len(jobs) == 174


@pytest.mark.slow  # 5.1 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_dynamos_frontend_starts_under_pmix_as_srtctl_starts_it(deployment_jobs):
    """Each job's Dynamo frontends: one srun each, under --mpi=pmix, on the nodes srtctl's orchestrator
    started them on for the job's recipe (tests/data/srtslurm: every dynamo.frontend it started ran so)."""
    captures = json.load(gzip.open(IX.parents[1] / "srtslurm" / "captures.json.gz"))
    jobs = [j for j in deployment_jobs if j.point.framework.startswith("dynamo-")]
    for job in jobs:
        capture = captures[choice_key(job.row, arm_settings(job.row)["CONFIG_FILE"])]
        names = [f"node{i:02d}" for i in range(capture["nodes"])]
        started = Counter(
            (call.get("mpi"), tuple(call["nodelist"]))
            for call in capture["stages"].get("start_frontend", [])
            if "dynamo.frontend" in call["command"]
        )
        written = Counter()
        for line in multinode_script(job, "x", SlurmOptions()).splitlines():
            words = _srun_words(line, names) if line.startswith("srun ") else []
            if "dynamo.frontend" in words:
                mpi = next((w.removeprefix("--mpi=") for w in words if w.startswith("--mpi=")), None)
                node = next(w.removeprefix("--nodelist=") for w in words if w.startswith("--nodelist="))
                written[(mpi, (node,))] += 1
        assert written == started, job.label()
        assert set(started) <= {("pmix", n) for _, n in started}
    assert len(jobs) > 400


def test_a_process_that_dies_before_the_endpoint_is_up_ends_the_job(
    deployment_jobs, dstubs, tmp_path, monkeypatch
):
    monkeypatch.setattr(slurm, "HEALTH_POLL_S", 0.1)
    job = _two_node_job(deployment_jobs)
    text = multinode_script(job, "d", SlurmOptions())
    r = _bash(text, tmp_path / "submit", dstubs, STUB_DIE="nats-server", STUB_CURL="7", STUB_NAME="driver")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == (
        "servelab: side-0 ended before side-1 was healthy (its log: deployment/side-0.log)"
    )
    log = _log(dstubs)
    assert not list(log.glob("servelab-*"))  # no benchmark
    # no server was started before etcd answered (etcd's srun may be stopped before it records itself)
    assert {s[5] for s in _sruns(log)} <= {"nats-server", "etcd"}
    assert _all_stopped(log, but="nats-server")


def test_hostile_deployment_values_arrive_as_written(deployment_jobs, dstubs, tmp_path):
    job = _two_node_job(deployment_jobs)
    dep = job.deployment
    procs = list(dep.processes)
    procs[2] = procs[2].model_copy(
        update={
            "argv": [*procs[2].argv, *HOSTILE, "{{node:1}}" + HOSTILE[0]],
            "env": {**procs[2].env, **{f"HOSTILE_{i}": v + "{{node:0}}" for i, v in enumerate(HOSTILE)}},
        }
    )
    files = {**dep.files, "conf/x.txt": "\n".join(HOSTILE) + "\n{{node:1}}\nSERVELAB_EOF\n"}
    job = job.model_copy(update={"deployment": dep.model_copy(update={"processes": procs, "files": files})})
    text = multinode_script(job, "h", SlurmOptions())
    _syntax(text)
    ready = str(len(job.deployment.processes))
    r = _bash(text, tmp_path / "submit", dstubs, STUB_NAME="driver", STUB_READY=ready)
    assert r.returncode == 0, r.stderr
    assert sorted(_sruns(_log(dstubs))) == sorted(_expected_sruns(job.deployment, NODES))
    written = (tmp_path / "submit" / "h" / "conf" / "x.txt").read_text()
    assert written == files["conf/x.txt"].replace("{{node:1}}", NODES[1])
    assert not list(tmp_path.rglob(MARKER))
    assert _all_stopped(_log(dstubs))


@pytest.mark.parametrize("node", ["gpu-a01;touch PWNED", "$(touch PWNED)", "a b"])
def test_a_node_name_that_is_no_host_name_starts_nothing(deployment_jobs, dstubs, tmp_path, node):
    text = multinode_script(_two_node_job(deployment_jobs), "n", SlurmOptions())
    r = _bash(text, tmp_path / "submit", {**dstubs, "STUB_NODES": f"gpu-a01\n{node}"})
    assert r.returncode == 2 and r.stderr.strip().endswith("is not a host name"), r.stderr
    assert not list(_log(dstubs).glob("srun-*")) and not list(tmp_path.rglob(MARKER))


def test_too_few_nodes_start_nothing(deployment_jobs, dstubs, tmp_path):
    text = multinode_script(_two_node_job(deployment_jobs), "n", SlurmOptions())
    r = _bash(text, tmp_path / "submit", {**dstubs, "STUB_NODES": "gpu-a01"})
    assert r.returncode == 2 and "the deployment needs 2 nodes, the allocation has 1" in r.stderr
    assert not list(_log(dstubs).glob("srun-*"))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"argv": ["-x"]}, "would read as an option"),
        ({"argv": ["A=b", "x"]}, "would read as an option or NAME=value"),
        ({"argv": ["x", "a\nb"]}, "control character"),
        ({"env": {"A B": "1"}}, "not an environment variable name"),
        ({"env": {"A": "1\r2"}}, "control character"),
        ({"argv": ["x", "{{node:2}}"]}, "names {{node:2}}; it has 2 node(s)"),
    ],
)
def test_bad_deployment_values_are_refused_in_one_line(deployment_jobs, change, message):
    job = _two_node_job(deployment_jobs)
    procs = [job.deployment.processes[0].model_copy(update=change), *job.deployment.processes[1:]]
    job = job.model_copy(update={"deployment": job.deployment.model_copy(update={"processes": procs})})
    with pytest.raises(ServelabError) as info:
        multinode_script(job, "x", SlurmOptions())
    assert message in str(info.value) and "\n" not in str(info.value)


def test_single_node_jobs_stay_in_the_array_beside_deployment_scripts(ix_jobs, deployment_jobs):
    deploy = _two_node_job(deployment_jobs)
    out = slurm_scripts([ix_jobs[0], deploy, ix_jobs[1]], SlurmOptions())
    names = script_names([ix_jobs[0], deploy, ix_jobs[1]])
    assert sorted(out) == sorted(["array.sbatch", names[1].removesuffix(".sh") + ".sbatch"])
    assert directives(out["array.sbatch"])[1] == "--array=0-1"
    assert f"cd -- {names[2].removesuffix('.sh')}\n" in out["array.sbatch"].split("\n1)\n")[1]


@pytest.mark.slow  # 4.1 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_skip_unrunnable_writes_the_jobs_that_can_run_and_says_how_many_it_left(tmp_path):
    # qwen3.5-fp8-gb200-dynamo-sglang: two deployments, and one on an srt-slurm fork servelab has no copy of
    args = ["sweep", "--dir", IX, "qwen3.5-fp8-gb200-dynamo-sglang", "--format", "slurm"]
    refused = servelab(*args, "--out", tmp_path / "all")
    assert refused.returncode == 2 and "no script can be written" in refused.stderr
    assert len(refused.stderr.strip().splitlines()[-1]) > 0 and "Traceback" not in refused.stderr
    assert not (tmp_path / "all").exists()
    r = servelab(*args, "--out", tmp_path / "some", "--skip-unrunnable")
    assert r.returncode == 0, r.stderr
    assert "note: --skip-unrunnable: 1 of 3 jobs left out" in r.stderr
    assert sorted(p.suffix for p in (tmp_path / "some").iterdir()) == [".sbatch", ".sbatch"]
    json_only = servelab("sweep", "--dir", IX, "qwen3.5-fp8-gb200-dynamo-sglang", "--skip-unrunnable")
    assert json_only.returncode == 2 and "applies to the sh and slurm formats" in json_only.stderr


def test_jobs_that_share_a_name_take_what_tells_them_apart():
    # a multinode row's MTP and plain arms share its layout: their scripts take the spec-decoding
    jobs = [j for j in pinned_jobs() if j.key == "dsr1-fp4-b200-dynamo-trt"]
    names = script_names(jobs)
    assert len(set(names)) == len(names)
    pair = [n for n in names if n.startswith("dsr1-fp4-b200-dynamo-trt_dsr1_8k1k_p1x4ep4dpa_d5x8ep8-conc6_")]
    assert sorted(pair) == [
        "dsr1-fp4-b200-dynamo-trt_dsr1_8k1k_p1x4ep4dpa_d5x8ep8-conc6_b200-multinode_mtp.sh",
        "dsr1-fp4-b200-dynamo-trt_dsr1_8k1k_p1x4ep4dpa_d5x8ep8-conc6_b200-multinode_none.sh",
    ]
    with pytest.raises(ServelabError, match="the same point twice"):
        script_names([jobs[0], jobs[0]])
