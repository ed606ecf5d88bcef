"""The stages `servelab run` calls, looked up by name in a registry (tests put stand-ins in their own).

    bench(target, point, repetition, out_dir)                one repetition of one bench point
    gsm8k(target, task, defaults, out_dir, dataset_path)     one lm_eval task (servelab.run.gsm8k)
    bfcl(target, spec, out_dir)                              the workload's BFCL (servelab.run.bfcl)

and `preflight` checks, before the server starts, that the eval stages can run (lm-eval and its tasks, the
BFCL environment).
each returning a StageOutput. The bench stage is `servelab bench` in-process; its result file is vllm bench
serve's JSON. A point with failed or unsent requests raises `BenchIncomplete` (a StageFailed carrying what
was measured); Ctrl-C or SIGTERM during the load raises `BenchInterrupted` (a KeyboardInterrupt carrying it),
so the run can keep it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from servelab.bench.config import BenchConfig
from servelab.bench.runner import run_point
from servelab.errors import ServelabError
from servelab.results.importers import vllm_entry
from servelab.run.bfcl import require_bfcl_python, run_bfcl
from servelab.run.gsm8k import check_tasks, run_gsm8k
from servelab.run.plan import BenchPoint, RunPlan
from servelab.run.stage import StageFailed, StageOutput, Target

StageRegistry = dict[str, Callable[..., StageOutput]]


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


def run_bench(target: Target, point: BenchPoint, repetition: int, out_dir: Path) -> StageOutput:
    cfg = BenchConfig(
        base_url=target.base_url,
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
            result, path, code = run_point(cfg, out=text)
    except ServelabError as e:  # the ready check failed, the model list could not be read
        raise StageFailed(str(e)) from None
    entry = vllm_entry(result.dump(), here=True)
    output = StageOutput(entry.metrics, entry.units, [p for p in (path, report) if p])
    if result.records_file:
        output.artifacts.append(Path(result.records_file))
    if result.interrupted:
        raise BenchInterrupted(code - 128, output)  # run_point's code is 128 + the signal
    lost = result.failed + result.not_sent
    if lost:
        reasons = "; ".join(f"{n}x {r}" for r, n in list(result.failure_reasons.items())[:3])
        raise BenchIncomplete(
            f"{lost} of {cfg.num_prompts} requests failed or were not sent ({reasons})", output
        )
    return output


def default_registry(bfcl_python: Path | None = None) -> StageRegistry:
    return {"bench": run_bench, "gsm8k": run_gsm8k, "bfcl": partial(run_bfcl, python=bfcl_python)}


def preflight(plan: RunPlan, bfcl_python: Path | None = None, gsm8k_path: Path | None = None) -> None:
    """Before the server starts: the eval stages' tools and files are there and lm-eval knows every task.
    A ServelabError (bad input) now saves starting a server that a stage could not use."""
    if "gsm8k" in plan.stages:
        if gsm8k_path is not None and not gsm8k_path.is_file():
            raise ServelabError(f"{gsm8k_path}: no such file (a GSM8K JSONL file)", field="gsm8k_path")
        check_tasks(plan.lm_tasks, plan.source)
    if "bfcl" in plan.stages and plan.bfcl:
        require_bfcl_python(bfcl_python)
