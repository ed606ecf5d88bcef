"""`servelab sweep --format slurm`: single-node jobs as one array job whose task N runs job N exactly as the
sh format's script runs it (under a stub srun that records its argv and environment), multinode deployments
as one sbatch script with an srun per process, every value quoted and every option checked."""

import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from servelab.cli.main import app
from servelab.errors import ServelabError
from servelab.recipes import slurm
from servelab.recipes.emit import emit
from servelab.recipes.filters import Filters
from servelab.recipes.pipelines import JOB_FILE, run_argv, script, script_names
from servelab.recipes.recipe_store import open_store
from servelab.recipes.slurm import NodeProcess, SlurmOptions, multinode_script, slurm_scripts
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
    store = open_store(IX)
    multi = expand(store, [], Filters(node_type="multi-node", max_jobs=10_000))[:1]
    with pytest.raises(ServelabError) as info:
        emit(multi, "slurm")
    assert "no script can be written: disaggregated" in str(info.value) and "\n" not in str(info.value)


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


@pytest.fixture(scope="module")
def disagg_job():
    """A pinned multinode row (SGLang prefill on one node, decode on another)."""
    store = open_store(IX)
    return next(j for j in expand(store, [], Filters(node_type="multi-node")) if j.point.disagg)


def test_multinode_script_sruns_each_process_on_its_node(disagg_job, stubs, tmp_path):
    # What the deployment launches will give per node (a stand-in: no multinode job has one yet).
    processes = [
        NodeProcess(
            node=0, argv=["prefill", "--model", disagg_job.point.model, *HOSTILE], env={"A": HOSTILE[3]}
        ),
        NodeProcess(node=1, argv=["decode", "--model", HOSTILE[1]]),
        NodeProcess(node=0, argv=["router", "--policy", HOSTILE[0]], env={"B": HOSTILE[5]}),
        NodeProcess(
            node=0,
            argv=["servelab", "run", "--job", JOB_FILE],
            env={"STUB_NAME": "driver", "STUB_WAIT": "prefill.ready decode.ready router.ready"},
        ),
    ]
    text = multinode_script(disagg_job, "deploy", processes, 8, SlurmOptions(partition="gpu"))
    _syntax(text)
    args = directives(text)
    assert args[:5] == [
        f"--job-name=servelab-{disagg_job.key}",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--gpus-per-node=8",
        "--exclusive",
    ]
    assert args[-3:] == ["--partition=gpu", "--output=%x-%j.out", "--error=%x-%j.err"]
    r = _bash(text, tmp_path / "submit", stubs)
    assert r.returncode == 0, r.stderr
    log = _log(stubs)
    sruns = sorted(["srun", *_argv(p)] for p in log.glob("srun-*.argv"))
    expected = []
    for p in processes:
        env = ["env", *(f"{k}={v}" for k, v in p.env.items())] if p.env else []
        expected.append([*slurm.SRUN_ONE, f"--relative={p.node}", *env, *p.argv])
    assert sruns == sorted(expected)
    for p in processes[:3]:
        name = p.argv[0]
        assert _argv(log / f"{name}.argv") == p.argv[1:]
        assert {k: v for k, v in _env(log / f"{name}.env").items() if k in p.env} == p.env
    driver = log / "servelab-driver"
    assert Path(f"{driver}.json").read_text() == (tmp_path / "submit" / "deploy" / JOB_FILE).read_text()
    # the servers are stopped when the driver ends (the signal reaches them a moment later)
    stopped = [log / f"{p.argv[0]}.stopped" for p in processes[:3]]
    for _ in range(100):
        if all(f.exists() for f in stopped):
            break
        time.sleep(0.1)
    assert all(f.exists() for f in stopped)
    assert not list(tmp_path.rglob(MARKER))


@pytest.mark.parametrize(
    "fields",
    [
        {"node": -1, "argv": ["x"]},
        {"node": 0, "argv": []},
        {"node": 0, "argv": ["-x"]},
        {"node": 0, "argv": ["A=b", "x"]},
        {"node": 0, "argv": ["x", "a\nb"]},
        {"node": 0, "argv": ["x"], "env": {"A B": "1"}},
        {"node": 0, "argv": ["x"], "env": {"A": "1\n2"}},
    ],
)
def test_node_processes_are_checked(fields):
    with pytest.raises(ValidationError):
        NodeProcess(**fields)
