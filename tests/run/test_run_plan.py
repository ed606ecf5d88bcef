"""Run plans from the 21 upstream perf-eval workloads, sweep jobs and recipe arms; --dry-run; docker argv."""

import json
from pathlib import Path

import pytest
import yaml
from clirun import servelab
from typer.testing import CliRunner

from servelab.cli.main import app
from servelab.errors import ServelabError
from servelab.recipes.filters import Filters
from servelab.recipes.pipelines import to_json
from servelab.recipes.recipe_store import DATA_DIR, open_store
from servelab.recipes.sweep import expand
from servelab.recipes.workload import parse_workload, split_serve_args
from servelab.recipes.yamlio import read_yaml
from servelab.results.provenance import REDACTED
from servelab.run.build import plan_from, read_job
from servelab.run.plan import ServerPlan, from_workload, speed_bench_dir
from servelab.run.server import docker_argv

PERF_EVAL = Path(__file__).parents[1] / "data" / "perf-eval"
WORKLOADS = sorted((PERF_EVAL / "workloads").glob("*.yaml"))
# upstream's GPU profiles at the workloads' commit, where its parser finds them (../lib beside workloads/)
PROFILES = yaml.safe_load((PERF_EVAL / "lib" / "gpu_profiles.yaml").read_text())
runner = CliRunner()


def test_all_upstream_workloads_are_there():
    assert len(WORKLOADS) == 21


def upstream_value(v) -> str:
    """A value as upstream's parser writes it into WORKLOAD_ENV (its fmt())."""
    return "True" if v is True else "False" if v is False else "None" if v is None else str(v)


def upstream_server(raw: dict) -> tuple[dict, str, bool]:
    """(env, image, trust_remote_code of the client) as perf-eval's lib/parse_workload.py and run.sh compute
    them with neither VLLM_IMAGE nor VLLM_COMMIT set: the profile's env with the workload's over it, HF_HOME
    from the profile's hf_home unless set, the workload's image else `<image_repo or vllm/vllm-
    openai>:nightly`, and --trust-remote-code for the client when serve_args has it bare or
    =true/True/1/yes/Yes."""
    profile = PROFILES[raw["gpu"]]
    vllm = raw["vllm"]
    env = {**(profile.get("env") or {}), **(vllm.get("env") or {})}
    if "HF_HOME" not in env and profile.get("hf_home"):
        env["HF_HOME"] = profile["hf_home"]
    repo = (profile.get("image_repo") or "").strip() or "vllm/vllm-openai"
    image = vllm.get("image", f"{repo}:nightly")
    words = (vllm.get("serve_args") or "").split()
    trust = any(
        w == "--trust-remote-code"
        or w in {f"--trust-remote-code={v}" for v in ("true", "True", "1", "yes", "Yes")}
        for w in words
    )
    return {k: upstream_value(v) for k, v in env.items()}, image, trust


def test_the_profiles_upstream_has_are_the_pinned_ones():
    assert set(PROFILES) == {"H200", "B200", "MI300X", "MI355X"}
    assert PROFILES["B200"]["env"] == {"VLLM_DEEP_GEMM_WARMUP": "skip", "NCCL_CUMEM_HOST_ENABLE": 0}


@pytest.mark.parametrize(
    "path",
    WORKLOADS,
    ids=lambda p: p.stem,
)
def test_every_upstream_workload_dry_runs(path):
    raw = read_yaml(path)
    res = runner.invoke(app, ["run", str(path), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    w = parse_workload(raw, str(path))
    s = plan["server"]
    assert s["argv"][:3] == ["vllm", "serve", raw["vllm"]["model"]]
    assert s["argv"][7:] == split_serve_args(raw["vllm"]["serve_args"], str(path))
    env, image, trust = upstream_server(raw)
    assert list(s["env"].items()) == list(env.items())  # the same order too: docker's -e list follows it
    assert s["image"] == image
    expected_stages = [
        s
        for s, there in (
            ("bench", bool(raw.get("vllm_bench", {}).get("configs"))),
            ("gsm8k", "lm_eval" in raw and not raw.get("bench_only")),
            ("bfcl", "bfcl" in raw and not raw.get("bench_only")),
        )
        if there
    ]
    assert plan["stages"] == expected_stages
    configs = w.vllm_bench.configs if w.vllm_bench else []
    runs = [(run, n, c, cfg) for cfg in configs for run, n, c in cfg.runs()]
    assert [p["config"] for p in plan["bench"]] == [r[0] for r in runs]
    for p, (_, n, c, cfg) in zip(plan["bench"], runs, strict=True):
        f = p["fields"]
        assert (f["num_prompts"], f["max_concurrency"], f["random_input_len"], f["random_output_len"]) == (
            n, c, cfg.input_len, cfg.output_len,
        )  # fmt: skip
        # upstream sends --num-warmups only from args; vllm bench serve's own default is 0
        assert f["num_warmups"] == cfg.args.get("num_warmups", 0)
        assert f.get("trust_remote_code", False) is trust
        assert p["repetitions"] == cfg.repetitions
        assert f["dataset_name"] == cfg.dataset and f["ignore_eos"] is (cfg.dataset == "random")
        if cfg.dataset == "speed_bench":  # perf-eval's prepared subset, output_len tokens per request
            subset = cfg.speed_bench_dataset_subset or "qualitative"
            assert f["dataset_path"] == speed_bench_dir(subset, cfg.speed_bench_category)
            assert f["speed_bench_output_len"] == cfg.output_len
    rows = [tuple(r) for r in plan["stage_rows"]]
    assert len(rows) == len(set(rows))
    if "gsm8k" in plan["stages"]:
        assert [t["task"] for t in plan["gsm8k"]] == [t.name for t in w.lm_eval.tasks]


def test_dry_run_text_names_argv_stages_and_assertions(tmp_path):
    path = WORKLOADS[1]
    res = runner.invoke(app, ["run", str(path), "--dry-run", "--assert", "bench.p99_ttft_ms <= 3000"])
    assert res.exit_code == 0, res.output
    assert "server: vllm serve" in res.stdout and "bench.p99_ttft_ms <= 3000" in res.stdout
    assert "\nstages: " in res.stdout and "\nassertions:\n" in res.stdout


def _workload(tmp_path, **extra) -> Path:
    data = {
        "name": "tiny",
        "gpu": "H200",
        "vllm": {"model": "org/m", "env": {"HF_TOKEN": "hf_secret", "A": 1}, "serve_args": "--api-key sk-1"},
        "lm_eval": {"tasks": [{"name": "gsm8k", "num_fewshot": 5}]},
        "vllm_bench": {"configs": [{"name": "s", "input_len": 8, "output_len": 4, "num_prompts": 4,
                                    "max_concurrency": [1, 2], "args": {"temperature": 0.5}}]},
    } | extra  # fmt: skip
    path = tmp_path / "wl.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_dry_run_redacts_secrets(tmp_path):
    res = runner.invoke(app, ["run", str(_workload(tmp_path)), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    assert "hf_secret" not in res.stdout and "sk-1" not in res.stdout
    plan = json.loads(res.stdout)
    # H200's profile (servelab's record of it, the workload being outside a perf-eval checkout) under it
    assert plan["server"]["env"] == {
        "VLLM_DEEP_GEMM_WARMUP": "skip",
        "HF_TOKEN": REDACTED,
        "A": "1",
        "HF_HOME": "/mnt/shared/hf-models",
    }
    assert plan["server"]["argv"][-2:] == ["--api-key", REDACTED]
    assert plan["bench"][0]["fields"]["temperature"] == 0.5


def test_stages_repetitions_and_workload_assertions(tmp_path):
    path = _workload(tmp_path, assertions=["bench.p99_ttft_ms <= 10"], bench_only=False)
    plan, gpu = plan_from(str(path), stages=["bench"], repetitions=3, assertions=["bench.failed == 0"])
    assert gpu == "H200" and plan.stages == ["bench"]
    assert plan.items() == [("bench", "s-conc-1", r) for r in range(3)] + [
        ("bench", "s-conc-2", r) for r in range(3)
    ]
    assert [a.text for a in plan.assertions] == ["bench.p99_ttft_ms <= 10", "bench.failed == 0"]
    bench_only, _ = plan_from(str(_workload(tmp_path, bench_only=True)))
    assert bench_only.stages == ["bench"]


@pytest.mark.parametrize(
    "extra, kw, says",
    [
        ({}, {"stages": ["bfcl"]}, "has no bfcl stage"),
        ({}, {"stages": ["warmup"]}, "expected a comma list of bench, gsm8k, bfcl"),
        ({"assertions": ["bench.x <== 1"]}, {}, "assertions: 'bench.x <== 1': expected"),
        ({}, {"assertions": ["bench.x <= 1%"]}, "a % bound is a regression"),
    ],
)
def test_bad_input_is_one_line(tmp_path, extra, kw, says):
    with pytest.raises(ServelabError, match=says):
        plan_from(str(_workload(tmp_path, **extra)), **kw)


def test_bad_bench_args_are_refused_before_anything_runs(tmp_path):
    wl = yaml.safe_load(_workload(tmp_path).read_text())
    wl["vllm_bench"]["configs"][0]["args"] = {"no_such_flag": 1}
    with pytest.raises(ServelabError, match="--no-such-flag is not a servelab bench option"):
        from_workload(parse_workload(wl, "wl.yaml"), "wl.yaml")


@pytest.mark.parametrize(
    "args, says",
    [
        (["--assert", "nonsense"], "--assert: 'nonsense': expected STAGE"),
        (["--stages", "bench,warmup"], "--stages: 'warmup'"),
        (["--job", "missing.json"], "missing.json: file not found"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, args, says):
    argv = ["run"] + ([] if "--job" in args else [str(_workload(tmp_path))]) + args + ["--dry-run"]
    r = servelab(*argv, cwd=tmp_path)  # in-process (tests/clirun.py)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr


@pytest.fixture
def job_file(tmp_path):
    jobs = expand(open_store(DATA_DIR), ["dsv4-fp4-b200-vllm"], Filters(seq_lens=["8k1k"], all_evals=True))
    path = tmp_path / "jobs.json"
    path.write_text(to_json(jobs))
    return path, jobs


def test_plan_from_a_sweep_job(job_file):
    path, jobs = job_file
    with pytest.raises(ServelabError, match="choose one with --job-index"):
        read_job(path, None)
    job = jobs[1]
    plan, _ = plan_from(None, job=path, job_index=1)
    assert plan.name == job.key and plan.fingerprint == job.fingerprint
    assert plan.server.argv == job.launch.argv and plan.server.port == job.launch.port
    [point] = plan.bench
    conc = job.row["conc"]
    assert point.config == f"{job.row['exp-name']}-conc-{conc}"
    bench = job.benches[0]
    assert point.fields["max_concurrency"] == conc and point.fields["num_prompts"] == bench.num_prompts
    assert point.fields["random_input_len"] == 8192 and point.fields["random_range_ratio"] == 0.8
    assert point.fields["num_warmups"] == bench.num_warmups == 2 * conc  # InferenceX: 2 per slot
    assert point.fields["ignore_eos"] is True and "base_url" not in point.fields  # the run's target
    # --all-evals rows are InferenceX's eval-only jobs: the evals run without the throughput benchmark
    assert job.row["eval-only"] and plan.stages == ["gsm8k"]
    assert [t.name for t in plan.lm_tasks] == ["gsm8k"] and plan.lm_tasks[0].num_fewshot == 5


def test_a_marked_throughput_job_runs_the_benchmark_then_its_evals(tmp_path):
    jobs = expand(open_store(DATA_DIR), ["dsv4-fp4-b200-vllm"], Filters(seq_lens=["8k1k"]))
    job = next(j for j in jobs if j.evals)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job.to_json()))
    plan, _ = plan_from(None, job=path)
    assert not job.row.get("eval-only") and plan.stages == ["bench", "gsm8k"]


def test_plan_from_a_recipe_arm_matches_its_job(job_file):
    _, jobs = job_file
    job = jobs[0]
    arm = f"tp{job.row['tp']}-ep{job.row['ep']}" + ("-dpa" if job.row["dp-attn"] else "")
    plan, _ = plan_from("dsv4-fp4-b200-vllm", arm=arm, conc=job.row["conc"], seq_len="8k1k")
    assert plan.server.argv == job.launch.argv
    with pytest.raises(ServelabError, match="no arm matches"):
        plan_from("dsv4-fp4-b200-vllm", arm="tp3-ep3", conc=job.row["conc"], seq_len="8k1k")
    with pytest.raises(ServelabError, match="needs --conc"):
        plan_from("dsv4-fp4-b200-vllm")


def _server(**kw) -> ServerPlan:
    return ServerPlan(["vllm", "serve", "org/m", "--port", "8000"], {"A": "1"}, 8000, "org/m", **kw)


def test_docker_argv(tmp_path):
    argv = docker_argv(
        _server(image="vllm/vllm-openai:v1@sha256:" + "a" * 64, secret_env=["HF_TOKEN"]),
        "c1",
        tmp_path / "hf",
        tmp_path,
    )
    assert argv[:5] == ["docker", "run", "--rm", "--name", "c1"]
    assert argv[argv.index("--gpus") + 1] == "all"
    assert argv[argv.index("--shm-size") + 1] == "16g" and argv[argv.index("--ipc") + 1] == "host"
    assert f"{tmp_path / 'hf'}:/root/.cache/huggingface" in argv
    assert "A=1" in argv and argv[argv.index("HF_TOKEN") - 1] == "-e"  # the secret by name, never a value
    i = argv.index("--entrypoint")
    assert argv[i + 1 :] == [
        "vllm",
        "vllm/vllm-openai:v1@sha256:" + "a" * 64,
        "serve",
        "org/m",
        "--port",
        "8000",
    ]


def test_docker_argv_mounts_the_plans_hf_home_at_its_own_path(tmp_path):
    """perf-eval's lib/server.sh: HF_HOME from the env is passed with -e and bind-mounted at the same path;
    its VLLM_ENGINE_READY_TIMEOUT_S comes before the env, which may override it."""
    server = ServerPlan(
        ["vllm", "serve", "org/m"], {"HF_HOME": "/mnt/shared/hf-models"}, 8000, "org/m", "i:1"
    )
    argv = docker_argv(server, "c", None, tmp_path)
    assert argv[argv.index("-v") + 1] == "/mnt/shared/hf-models:/mnt/shared/hf-models"
    assert "HF_HOME=/mnt/shared/hf-models" in argv and not any("/root/.cache" in a for a in argv)
    assert argv.index("VLLM_ENGINE_READY_TIMEOUT_S=3600") < argv.index("HF_HOME=/mnt/shared/hf-models")
    # --hf-cache names the host's copy; the container still sees it where HF_HOME says
    argv = docker_argv(server, "c", tmp_path / "hf", tmp_path)
    assert argv[argv.index("-v") + 1] == f"{tmp_path / 'hf'}:/mnt/shared/hf-models"


def test_docker_argv_amd_and_no_image(tmp_path):
    argv = docker_argv(_server(image="rocm/vllm:x"), "c", tmp_path, tmp_path, gpu="MI355X")
    assert (
        "--gpus" not in argv
        and ["--device", "/dev/kfd"] == argv[argv.index("/dev/kfd") - 1 : argv.index("/dev/kfd") + 1]
    )
    with pytest.raises(ServelabError, match="needs an image"):
        docker_argv(_server(), "c", tmp_path, tmp_path)


def test_the_cli_and_the_workload_bound_repetitions_alike():
    from servelab.cli import run as cli_run  # noqa: PLC0415
    from servelab.recipes import workload  # noqa: PLC0415

    assert cli_run.MAX_REPETITIONS == workload.MAX_REPETITIONS


@pytest.mark.slow  # 1.7 s of CPU a case: a whole servelab run with its server processes
def test_a_multinode_job_benchmarks_each_of_its_concurrencies_against_one_deployment(tmp_path):
    """InferenceX's multinode rows hold several concurrencies for one deployment: the plan has a bench point
    for each, in the row's order, and one server (the deployment's endpoint)."""
    store = open_store(Path(__file__).parents[1] / "data" / "inferencex" / "configs")
    jobs = expand(store, ["dsr1-fp8-gb300-dynamo-sglang"], Filters(seq_lens=["8k1k"]))
    job = next(j for j in jobs if j.deployment is not None and len(j.benches) > 1)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job.to_json()))
    plan, _ = plan_from(None, job=path)
    concs = job.row["conc"]
    assert [p.config for p in plan.bench] == [f"{job.row['exp-name']}-conc-{c}" for c in concs]
    assert [p.fields["max_concurrency"] for p in plan.bench] == concs
    assert plan.server.port == job.deployment.processes[job.deployment.endpoint].port
    assert len(plan.server.processes) == len(job.deployment.processes)
