"""The run plan: what `servelab run` starts, benchmarks, evaluates and judges, built from a perf-eval
workload, a sweep job (`servelab sweep --format json`) or a recipe arm, before anything runs (`--dry-run`
prints it).

Bench configs follow perf-eval (lib/run_vllm_bench.sh): each config x (num_prompts, max_concurrency) pair is
one point named `<name>-conc-<value>`, the random dataset with --ignore-eos, the config's `args` as bench
options, and --trust-remote-code when the server has it. Warm-ups are the args' num_warmups, else none:
upstream sends no --num-warmups, and vllm bench serve's default is 0. The server gets the GPU profile's env
under the workload's and HF_HOME, and the profile's default image, as lib/parse_workload.py and lib/server.sh
give them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import ValidationError

from servelab.bench.config import BenchConfig, parse_goodput, parse_metadata
from servelab.engines.argv import parse as parse_flags
from servelab.engines.command import engine_of_argv, parse
from servelab.engines.settings import ServerSettings
from servelab.engines.vllm.grammar import GRAMMAR as VLLM
from servelab.errors import ServelabError
from servelab.recipes.gpu_profiles import profile_for
from servelab.recipes.job import AGENTIC_TRACE_ENV, EvalSpec, Job
from servelab.recipes.pipelines import arm_name
from servelab.recipes.workload import (
    PerfEvalWorkload,
    WlBenchConfig,
    WlBfcl,
    WlModelArgs,
    WlTask,
    bench_trusts_remote_code,
    default_image,
    server_env,
    split_serve_args,
)
from servelab.redact import redact_argv, redact_env, redact_headers
from servelab.run.assertions import Assertion, parse_all
from servelab.run.deployment import SERVER_ROLES, engine_process, on_this_machine, public, start_order
from servelab.run.stage import StageName
from servelab.runner.deployment import DeployedProcess

STAGES = tuple(StageName)
DEFAULT_PORT = 8000
LOCALHOST = "127.0.0.1"
# vllm bench serve options whose CLI form is a string that BenchConfig holds parsed
_LIST_ARGS = {"percentile_metrics", "metric_percentiles"}


@dataclass(frozen=True)
class ServerPlan:
    argv: list[str]
    env: dict[str, str]  # set over the caller's environment
    port: int
    model: str  # the served model name
    image: str | None = None  # with its @sha256 digest when pinned
    health_path: str = "/health"
    files: dict[str, str] = field(default_factory=dict)  # relative path -> content, written in the run folder
    secret_env: list[str] = field(default_factory=list)  # names passed through from the caller's environment
    # a deployment's processes in start order (argv, port and health_path above are its endpoint's); empty:
    # one server, argv
    processes: tuple[DeployedProcess, ...] = ()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass(frozen=True)
class BenchPoint:
    """One benchmark point: a config at one concurrency, run `repetitions` times."""

    config: str  # <name>-conc-<value>
    repetitions: int
    fields: dict  # BenchConfig fields (all but base_url, model and where results go)


@dataclass
class RunPlan:
    name: str
    source: str
    server: ServerPlan
    stages: list[StageName]
    bench: list[BenchPoint] = field(default_factory=list)
    lm_tasks: list[WlTask] = field(default_factory=list)
    lm_defaults: WlModelArgs | None = None
    bfcl: WlBfcl | None = None
    assertions: list[Assertion] = field(default_factory=list)
    fingerprint: str | None = None

    def items(self) -> list[tuple[str, str, int]]:
        """(stage, config, repetition) of every stage row this plan writes, in run order."""
        out: list[tuple[str, str, int]] = []
        if StageName.BENCH in self.stages:
            out += [(StageName.BENCH, p.config, r) for p in self.bench for r in range(p.repetitions)]
        if StageName.GSM8K in self.stages:
            out += [(StageName.GSM8K, t.name, 0) for t in self.lm_tasks]
        if StageName.BFCL in self.stages and self.bfcl:
            out.append((StageName.BFCL, "", 0))
        return out

    def dump(self) -> dict:
        """The plan as --dry-run shows it: argv and env with secrets redacted."""
        s = self.server
        return {
            "name": self.name,
            "source": self.source,
            "fingerprint": self.fingerprint,
            "server": {
                "argv": redact_argv(s.argv),
                "env": redact_env(s.env),
                "port": s.port,
                "model": s.model,
                "image": s.image,
                "health_path": s.health_path,
                "files": sorted(s.files),
                "secret_env": s.secret_env,
            }
            | ({"deployment": public(s.processes)} if s.processes else {}),
            "stages": [str(s) for s in self.stages],
            "bench": [_public(p) for p in self.bench] if StageName.BENCH in self.stages else [],
            "gsm8k": [
                {"task": t.name, "num_fewshot": t.num_fewshot, "model_args": _lm_args(self.lm_defaults, t)}
                for t in self.lm_tasks
            ]
            if StageName.GSM8K in self.stages
            else [],
            "bfcl": self.bfcl.dump() if self.bfcl and StageName.BFCL in self.stages else None,
            "assertions": [a.text for a in self.assertions],
            "stage_rows": [list(i) for i in self.items()],
        }


def _public(point: BenchPoint) -> dict:
    """A bench point as it may be printed: header values (Authorization, API keys) and secret metadata
    redacted, as the bench result file keeps them."""
    d = asdict(point)
    fields = dict(d["fields"])
    if fields.get("headers"):
        fields["headers"] = redact_headers(fields["headers"])
    if fields.get("metadata"):
        fields["metadata"] = redact_env(fields["metadata"])
    return d | {"fields": fields}


def _lm_args(defaults: WlModelArgs | None, task: WlTask) -> dict:
    return (defaults.dump() if defaults else {}) | (task.model_args.dump() if task.model_args else {})


def choose_stages(available: list[StageName], requested: list[str] | None, source: str) -> list[StageName]:
    """The stages to run: those requested (each must be one the source has), else all it has."""
    if requested is None:
        return available
    if not requested:  # `--stages ,` would run nothing and pass
        raise ServelabError(f"no stage named; expected a comma list of {', '.join(STAGES)}", field="stages")
    for s in requested:
        if s not in StageName._value2member_map_:
            raise ServelabError(f"{s!r}: expected a comma list of {', '.join(STAGES)}", field="stages")
        if s not in available:
            has = ", ".join(map(str, available)) or "none"
            raise ServelabError(f"{source} has no {s} stage (it has {has})", field="stages")
    return [s for s in STAGES if s in requested]


def bench_fields(
    input_len: int, output_len: int, num_prompts: int, conc: int, args: dict, where: str
) -> dict:
    """BenchConfig fields of one point, checked now (bad args are bad input before anything starts)."""
    out: dict = {
        "dataset_name": "random",
        "random_input_len": input_len,
        "random_output_len": output_len,
        "num_prompts": num_prompts,
        "max_concurrency": conc,
        "ignore_eos": True,
        "num_warmups": 0,  # vllm bench serve's default, which upstream's runner leaves as it is
    }
    for key, value in args.items():
        name = key.lstrip("-").replace("-", "_")
        if name in _LIST_ARGS and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        try:
            if name == "goodput":
                value = parse_goodput(value if isinstance(value, list) else [str(value)])
            elif name == "metadata":
                value = parse_metadata(value if isinstance(value, list) else [str(value)])
        except ValueError as e:
            raise ServelabError(f"{where}: args: {e}") from None
        if name not in BenchConfig.model_fields or name in ("base_url", "model", "save_result", "result_dir"):
            raise ServelabError(f"{where}: args: --{name.replace('_', '-')} is not a servelab bench option")
        out[name] = value
    try:
        BenchConfig(**out)
    except ValidationError as e:
        raise ServelabError.from_validation(e, f"{where}: args") from None
    return out


def served_name(argv: list[str], model: str) -> str:
    """The model name a server answers to: its --served-model-name (the first, where vLLM takes several),
    else the checkpoint it serves, read by the server's grammar. A server no grammar reads (Dynamo's
    workers, TileRT's) is read for the flag itself, as those servers spell it."""
    try:
        named = parse(engine_of_argv(argv), argv, fields=("served_model_name",)).served_model_name
    except ServelabError:
        named = None
    return named or _served_flag(argv) or model


def _served_flag(argv: list[str]) -> str | None:
    return next((a.value for a in parse_flags(argv) if a.name == "--served-model-name" and a.value), None)


def deployment_served_name(procs: Sequence[DeployedProcess], model: str) -> str:
    """The model name a deployment's endpoint answers to: the first name a server of it is given (a router
    passes requests on under the name its servers serve; the first server's argv may name none, as a
    TileRT decode server's does when its prefill vLLM names it)."""
    servers = [p for p in procs if p.role in SERVER_ROLES] or list(procs)
    names = (served_name(p.argv, "") for p in servers)
    return next((n for n in names if n), served_name(engine_process(tuple(procs)).argv, model))


def _workload_points(
    cfg: WlBenchConfig, repetitions: int | None, trust_remote_code: bool, where: str
) -> list[BenchPoint]:
    points = []
    for run, num_prompts, conc in cfg.runs():
        fields = bench_fields(cfg.input_len, cfg.output_len, num_prompts, conc, cfg.args, where)
        if trust_remote_code:
            fields["trust_remote_code"] = True
        if cfg.backend:
            fields["backend"] = cfg.backend
            if cfg.backend == "openai-chat":
                fields["endpoint"] = "/v1/chat/completions"
        if cfg.dataset == "speed_bench":
            fields = _speed_bench_fields(cfg, fields, where)
        points.append(BenchPoint(run, repetitions or cfg.repetitions, fields))
    return points


def speed_bench_dir(subset: str, category: str | None) -> str:
    """Where perf-eval's run_vllm_bench.sh prepares a SPEED-Bench subset (its own variable and default)."""
    root = os.environ.get("VLLM_SPEED_BENCH_DIR") or "/tmp/vllm-speed-bench"
    return f"{root}/{subset}" + (f"-{category}" if category else "")


def _speed_bench_fields(cfg: WlBenchConfig, fields: dict, where: str) -> dict:
    """A SPEED-Bench point as perf-eval runs it: the prepared subset, output_len tokens per request, and no
    --ignore-eos (real prompts end on their own)."""
    subset = cfg.speed_bench_dataset_subset or "qualitative"
    fields = fields | {
        "dataset_name": "speed_bench",
        "dataset_path": speed_bench_dir(subset, cfg.speed_bench_category),
        "speed_bench_dataset_subset": subset,
        "speed_bench_category": cfg.speed_bench_category,
        "speed_bench_output_len": cfg.output_len,
        "ignore_eos": False,
    }
    try:
        BenchConfig(**fields)
    except ValidationError as e:
        raise ServelabError.from_validation(e, f"{where}: speed_bench") from None
    return fields


def from_workload(
    w: PerfEvalWorkload,
    source: str,
    *,
    stages: list[str] | None = None,
    repetitions: int | None = None,
    assertions: Sequence[str] = (),
    port: int = DEFAULT_PORT,
    image: str | None = None,
) -> RunPlan:
    """The plan of a perf-eval workload: `vllm serve MODEL --port P SERVE_ARGS` with the env upstream's
    runner gives it (the GPU profile's under the workload's, and HF_HOME), its bench configs, lm_eval tasks
    and bfcl; bench_only drops the evals. `source` is the workload's path, beside which a perf-eval checkout
    keeps its GPU profiles."""
    serve_args = split_serve_args(w.vllm.serve_args, source)
    runner = ServerSettings(model=w.vllm.model, host=LOCALHOST, port=port)
    argv = VLLM.render(runner).argv + serve_args
    profile, _ = profile_for(w.gpu, source)
    server = ServerPlan(
        argv,
        server_env(w, profile),
        port,
        served_name(argv, w.vllm.model),
        image=image or w.vllm.image or default_image(profile),
    )
    available = []
    configs = w.vllm_bench.configs if w.vllm_bench else []
    if configs:
        available.append(StageName.BENCH)
    if w.lm_eval and not w.bench_only:
        available.append(StageName.GSM8K)
    if w.bfcl and not w.bench_only:
        available.append(StageName.BFCL)
    points = []
    for i, cfg in enumerate(configs):
        where = f"{source}: vllm_bench.configs[{i}] ({cfg.name})"
        points += _workload_points(cfg, repetitions, bench_trusts_remote_code(w.vllm.serve_args), where)
    return RunPlan(
        name=w.name,
        source=source,
        server=server,
        stages=choose_stages(available, stages, source),
        bench=points,
        lm_tasks=list(w.lm_eval.tasks) if w.lm_eval else [],
        lm_defaults=w.lm_eval.model_args if w.lm_eval else None,
        bfcl=w.bfcl,
        assertions=parse_all(list(w.assertions), f"{source}: assertions") + parse_all(list(assertions)),
    )


def _lm_task(ev: EvalSpec, where: str) -> WlTask:
    """A sweep job's lm-eval spec as the workload task the gsm8k stage runs (its further model_args too, as
    a perf-eval workload gives them)."""
    typed = {"num_concurrent": ev.num_concurrent, "max_gen_toks": ev.max_gen_toks}
    args = {k: v for k, v in typed.items() if v is not None} | (ev.model_args or {})
    try:
        model_args = WlModelArgs.model_validate(args)
    except ValidationError as e:
        raise ServelabError.from_validation(e, f"{where}: evals {ev.task} model_args") from None
    return WlTask(
        name=ev.task, num_fewshot=ev.num_fewshot, model_args=model_args if model_args.dump() else None
    )


def from_job(
    job: Job,
    source: str,
    *,
    stages: list[str] | None = None,
    repetitions: int | None = None,
    assertions: Sequence[str] = (),
    trace: str | None = None,
) -> RunPlan:
    """The plan of one sweep job: its rendered launch, its client point, its evals (when the row runs them)
    and the recipe's assertions. An agentic-coding job's point replays `trace` (the user's file: servelab
    never downloads at run time)."""
    if (job.launch is None and job.deployment is None) or not job.benches:
        raise ServelabError(f"{source}: {job.label()}: nothing servelab can start: {job.not_renderable}")
    row = job.point
    image = row.image + (f"@{job.image_digest}" if job.image_digest else "")
    server = _job_server(job, image)
    where = f"{source}: {job.label()}"
    tasks = [_lm_task(ev, where) for ev in job.evals]
    # an eval-only row (InferenceX's separate eval job) runs the evals without the throughput benchmark
    chosen = choose_stages(
        ([] if row.eval_only else [StageName.BENCH]) + ([StageName.GSM8K] if tasks else []), stages, source
    )
    # a multinode row holds several concurrencies, benchmarked one after another against one deployment
    points = []
    for bench in job.benches:
        fields = bench.options()
        if bench.dataset_name == "trace" and StageName.BENCH in chosen:
            fields["dataset_path"] = trace_file(trace, where)
        if bench.dataset_name != "trace" or "dataset_path" in fields:
            # bad values are bad input now, before a server starts
            bench.config(f"{where}: bench", **{k: v for k, v in fields.items() if k == "dataset_path"})
        points.append(BenchPoint(f"{row.exp_name}-conc-{bench.conc}", repetitions or 1, fields))
    texts = []
    for metric, bound in job.assertions.items():
        if bound.min is not None:
            texts.append(f"bench.{metric} >= {bound.min}")
        if bound.max is not None:
            texts.append(f"bench.{metric} <= {bound.max}")
    return RunPlan(
        name=job.key,
        source=source,
        server=server,
        stages=chosen,
        bench=points,
        lm_tasks=tasks,
        assertions=parse_all(texts, f"{source}: assertions") + parse_all(list(assertions)),
        fingerprint=job.fingerprint,
    )


def _job_server(job: Job, image: str) -> ServerPlan:
    """The server of a job: its launch, or its deployment (started whole; the benchmark sends to its
    endpoint, with the model name its first server answers to)."""
    model = job.point.model
    if job.launch is not None:
        launch = job.launch
        model = served_name(launch.argv, model)
        return ServerPlan(
            launch.argv,
            launch.env,
            launch.port,
            model,
            image,
            launch.health_path,
            launch.files,
            job.secret_env,
        )
    if job.deployment is None:
        raise ServelabError(f"{job.label()}: neither a launch nor a deployment", field="job")
    deployment = on_this_machine(job.deployment)
    procs, endpoint = start_order(deployment)
    front = procs[endpoint]
    return ServerPlan(
        front.argv,
        front.env or {},
        front.port or 0,  # Deployment's validator: the endpoint has a port
        deployment_served_name(procs, model),
        image,
        front.health_path or "/health",
        deployment.files,
        job.secret_env,
        processes=procs,
    )


def trace_file(trace: str | None, where: str) -> str:
    """The trace file an agentic-coding job replays, as an absolute path; one line when there is none."""
    if not trace:
        raise ServelabError(
            f"{where}: an agentic-coding job replays a trace file: set {AGENTIC_TRACE_ENV} to one "
            "(InferenceX's trace format, docs/bench.md)"
        )
    path = Path(trace)
    if not path.is_file():
        raise ServelabError(
            f"{trace}: no such file ({AGENTIC_TRACE_ENV}: the trace an agentic-coding job replays)"
        )
    return str(path.resolve())


def pick_job(jobs: list[Job], key: str, arm: str | None, seq: str | None) -> Job:
    """The one job of a recipe at a concurrency that --arm and --seq-len select."""
    chosen = [
        j
        for j in jobs
        if (arm is None or arm_name(j.point) == arm) and (seq is None or j.point.seq_len == seq)
    ]
    if len(chosen) == 1:
        return chosen[0]
    names = sorted({f"--arm {arm_name(j.point)} --seq-len {j.point.seq_len}" for j in jobs})
    if not chosen:
        raise ServelabError(f"{key}: no arm matches; it has: {'; '.join(names)}", field="arm")
    raise ServelabError(f"{key}: {len(chosen)} arms match; choose one of: {'; '.join(names)}", field="arm")
