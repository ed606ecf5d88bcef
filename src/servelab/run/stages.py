"""The stages `servelab run` runs, as classes in a registry keyed by stage name (tests put stand-ins in their
own registry). Each has the one signature of servelab.run.stage.Stage:

    BenchStage   one repetition of one bench point (`servelab bench` in-process)
    Gsm8kStage   one lm_eval task (servelab.run.gsm8k); preflight: lm-eval and its tasks, the JSONL file
    BfclStage    the workload's BFCL (servelab.run.bfcl); preflight: the BFCL environment

The bench stage's result file is vllm bench serve's JSON. A point with failed or unsent requests raises
`BenchIncomplete` (a StageFailed carrying what was measured); Ctrl-C or SIGTERM during the load raises
`BenchInterrupted` (a KeyboardInterrupt carrying it), so the run can keep it.
"""

from __future__ import annotations

from pathlib import Path

from servelab.bench.agentic.run import run_trace_point
from servelab.bench.config import BenchConfig
from servelab.bench.processes import WorkerPool
from servelab.bench.runner import lost, run_point
from servelab.errors import ServelabError
from servelab.registry import Registry
from servelab.results.importers import vllm_entry
from servelab.run.bfcl import require_bfcl_python, run_bfcl
from servelab.run.gsm8k import check_tasks, run_gsm8k
from servelab.run.plan import BenchPoint, RunPlan
from servelab.run.stage import (
    Stage,
    StageCall,
    StageFailed,
    StageName,
    StageOptions,
    StageOutput,
    Target,
)

StageRegistry = Registry[type[Stage]]


class BenchIncomplete(StageFailed):
    def __init__(self, message: str, output: StageOutput) -> None:
        super().__init__(message)
        self.output = output


class BenchInterrupted(KeyboardInterrupt):
    def __init__(self, signum: int, output: StageOutput) -> None:
        super().__init__(f"signal {signum}")
        self.signum, self.output = signum, output


def result_name(config: str, repetition: int) -> str:
    return f"bench-{config}-rep{repetition}.json"


def run_bench(
    target: Target, point: BenchPoint, repetition: int, out_dir: Path, workers: WorkerPool | None = None
) -> StageOutput:
    """One repetition of a bench point, on the run's worker processes (`workers`) or its own."""
    cfg = BenchConfig(
        base_url=target.request_url(),  # the client sends the credentials and stores the URL without them
        model=target.model,
        tokenizer=target.tokenizer,
        label=point.config.rsplit("-conc-", 1)[0],
        save_result=True,
        result_dir=str(out_dir),
        result_filename=result_name(point.config, repetition),
        live=False,
        **point.fields,
    )
    report = out_dir / result_name(point.config, repetition).replace(".json", ".txt")
    try:
        with open(report, "w") as text:  # the summary `servelab bench` prints, kept beside the result
            run_one = run_trace_point if cfg.dataset_name == "trace" else run_point
            result, path, code = run_one(cfg, out=text, pool=workers)
    except ServelabError as e:  # the ready check failed, the model list could not be read
        raise StageFailed(str(e)) from None
    entry = vllm_entry(result.dump(), here=True)
    output = StageOutput(entry.metrics, entry.units, [p for p in (path, report) if p])
    if result.records_file:
        output.artifacts.append(Path(result.records_file))
    if result.interrupted:
        raise BenchInterrupted(code - 128, output)  # run_point's code is 128 + the signal
    missing = lost(cfg, result)
    if missing:
        reasons = "; ".join(f"{n}x {r}" for r, n in list(result.failure_reasons.items())[:3])
        # a trace replay's requests are its sessions' turns: no request count was asked for
        of = "" if cfg.dataset_name == "trace" else f" of {cfg.num_prompts}"
        raise BenchIncomplete(f"{missing}{of} requests failed or were not sent ({reasons})", output)
    return output


class BenchStage(Stage):
    name = StageName.BENCH

    def run(self, target: Target, call: StageCall) -> StageOutput:
        point = next(p for p in call.plan.bench if p.config == call.config)
        return run_bench(target, point, call.repetition, call.run_dir, call.workers)


class Gsm8kStage(Stage):
    name = StageName.GSM8K

    def preflight(self, plan: RunPlan, options: StageOptions) -> None:
        path = options.gsm8k_path
        if path is not None and not path.is_file():
            raise ServelabError(f"{path}: no such file (a GSM8K JSONL file)", field="gsm8k_path")
        check_tasks(plan.lm_tasks, plan.source)

    def run(self, target: Target, call: StageCall) -> StageOutput:
        task = next(t for t in call.plan.lm_tasks if t.name == call.config)
        out = call.run_dir / f"gsm8k-{call.config}"
        out.mkdir(exist_ok=True)
        return run_gsm8k(target, task, call.plan.lm_defaults, out, call.options.gsm8k_path)


class BfclStage(Stage):
    name = StageName.BFCL

    def preflight(self, plan: RunPlan, options: StageOptions) -> None:
        if plan.bfcl:
            require_bfcl_python(options.bfcl_python)

    def run(self, target: Target, call: StageCall) -> StageOutput:
        if call.plan.bfcl is None:
            raise StageFailed("bfcl: the plan holds no BFCL spec")
        out = call.run_dir / "bfcl"
        out.mkdir(exist_ok=True)
        return run_bfcl(target, call.plan.bfcl, out, python=call.options.bfcl_python)


def stage_registry(*stages: type[Stage]) -> StageRegistry:
    """A registry of these stage classes under their names."""
    registry: StageRegistry = Registry("stage")
    for stage in stages:
        registry.register(stage.name.value, stage)
    return registry


STAGES = stage_registry(BenchStage, Gsm8kStage, BfclStage)


def preflight(plan: RunPlan, options: StageOptions, registry: StageRegistry = STAGES) -> None:
    """Before the server starts: every stage of the plan can run (the eval stages' tools and files are there,
    lm-eval knows every task). A ServelabError (bad input) now saves starting a server that a stage could
    not use."""
    for name in plan.stages:
        registry.get(name)().preflight(plan, options)
