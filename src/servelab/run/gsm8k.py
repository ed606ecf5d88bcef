"""The GSM8K stage: lm-eval's gsm8k task against the server under test, as perf-eval runs it.

lm-eval (the `evals` extra) runs in-process with its `local-completions` model (`local-chat-completions` with
`chat=True`, which applies the server's chat template): the workload task's num_fewshot and the model_args
perf-eval passes (num_concurrent, max_gen_toks, max_length, tokenized_requests, tokenizer_backend, timeout),
a task's own winning over the workload's defaults. The questions come from the Hugging Face hub (openai/gsm8k)
unless `dataset_path` names a local JSONL file of the hub's form ({"question", "answer"} per line, the answer
ending in "#### N"); that file then serves as the test split and as the few-shot pool, from which lm-eval
leaves out the question being asked.

Metrics, from lm-eval's two filters of the gsm8k task (its own names, `exact_match,<filter>`):
  exact_match            strict-match: the number after "####", the format the few-shot examples teach
  exact_match_flexible   flexible-extract: the last number in the answer, whatever the format
each with its `_stderr` (lm-eval's bootstrap standard error of the mean), and `num_questions`.
lm-eval's results (its aggregated JSON) and per-question samples (JSONL) are kept in `out_dir`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from servelab.errors import ServelabError
from servelab.recipes.workload import WlModelArgs, WlTask
from servelab.run.stage import StageFailed, StageOutput, Target

INSTALL_HINT = "pip install 'servelab[evals]' (or pip install '.[evals]' in a checkout)"
# lm-eval's filter name -> the suffix of the metric servelab reports
FILTERS = {"strict-match": "", "flexible-extract": "_flexible"}
RESULTS_FILE = "lm_eval_results.json"
SAMPLES_FILE = "lm_eval_samples.jsonl"


def lm_eval_model_args(
    target: Target, task: WlTask, defaults: WlModelArgs | None, chat: bool = False
) -> dict[str, Any]:
    """The model_args lm-eval gets: the server, then the workload's defaults, then the task's own."""
    endpoint = "/v1/chat/completions" if chat else "/v1/completions"
    # without the attached URL's user:password: lm-eval writes its model args into its results file
    args: dict[str, Any] = {"model": target.model, "base_url": target.base_url.rstrip("/") + endpoint}
    if target.tokenizer:
        args["tokenizer"] = target.tokenizer
    args |= defaults.dump() if defaults else {}
    args |= task.model_args.dump() if task.model_args else {}
    return args


def local_task_config(task: WlTask, dataset_path: Path, task_yaml: Path, out_dir: Path) -> Path:
    """A task file that is lm-eval's own task with its questions read from `dataset_path`."""
    if not dataset_path.is_file():
        raise ServelabError(
            f"{dataset_path}: no such file (a GSM8K JSONL file was expected)", field="gsm8k_path"
        )
    config = {
        "include": str(task_yaml),
        "task": task.name,
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {"test": str(dataset_path.resolve())}},
        "test_split": "test",
        "training_split": None,
        "fewshot_split": "test",  # lm-eval leaves the question itself out of its few-shot examples
    }
    path = out_dir / f"{task.name}-local.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@contextmanager
def _api_key(key: str | None) -> Iterator[None]:
    """lm-eval's local models read the key from OPENAI_API_KEY; passing it as a model arg would put it in
    lm-eval's results file."""
    before = os.environ.get("OPENAI_API_KEY")
    if key is not None:
        os.environ["OPENAI_API_KEY"] = key
    try:
        yield
    finally:
        if key is not None:
            if before is None:
                os.environ.pop("OPENAI_API_KEY", None)
            else:
                os.environ["OPENAI_API_KEY"] = before


def metrics_from_results(task_results: dict[str, Any]) -> dict[str, float]:
    """servelab's metric names from lm-eval's `results[task]` block (keys like 'exact_match,strict-match')."""
    metrics: dict[str, float] = {}
    for key, value in task_results.items():
        name, _, filt = key.partition(",")
        if filt not in FILTERS or not isinstance(value, (int, float)):
            continue  # lm-eval writes 'N/A' for a stderr it could not compute
        base = name.removesuffix("_stderr")
        stderr = "_stderr" if name.endswith("_stderr") else ""
        metrics[f"{base}{FILTERS[filt]}{stderr}"] = float(value)
    return metrics


def _task_index(task: WlTask, tasks_dir: Path, task_manager):
    """(lm-eval's TaskManager that knows the task, the task's index entry); ServelabError when lm-eval has no
    task file of that name."""
    # lm-eval keeps each task family in a folder of its name (tasks/gsm8k/gsm8k.yaml); indexing that folder
    # takes a second or two, indexing every task lm-eval has some 20 s on a small machine
    family = tasks_dir / task.name
    manager = task_manager(include_defaults=False, include_path=str(family)) if family.is_dir() else None
    unknown = ServelabError(f"{task.name!r} is not an lm-eval task with a task file", field="task")
    if manager is None or task.name not in manager.task_index:
        if not _written_in(tasks_dir, task.name):
            raise unknown
        manager = task_manager()
    entry = manager.task_index.get(task.name)
    if entry is None or entry.yaml_path is None:
        raise unknown
    return manager, entry


def _written_in(tasks_dir: Path, name: str) -> bool:
    """Whether `name` is written in a file of lm-eval's task tree (a second of reading, not 12-20 s of
    indexing). Every name lm-eval's index holds, a task's, a group's or a tag's, is a value of its task files
    or of the templates they include, and all 14,683 of lm-eval 0.4.13's are written as they are (none as
    a YAML escape): a name written nowhere is none of them."""
    needle = name.encode("utf-8", "surrogatepass")
    return any(
        needle in path.read_bytes()
        for path in tasks_dir.rglob("*")
        if "__pycache__" not in path.parts and path.is_file()
    )


def check_tasks(tasks: list[WlTask], source: str) -> None:
    """What a run checks before it starts the server: lm-eval is installed and has every task of the
    workload (bad input otherwise, rather than a stage error once the server has taken its time to start)."""
    try:
        import lm_eval.tasks  # noqa: PLC0415 (the optional `evals` extra)
    except ImportError:
        raise ServelabError(
            f"the gsm8k stage needs lm-eval: {INSTALL_HINT}; or leave the stage out with --stages"
        ) from None
    for i, task in enumerate(tasks):
        try:
            _task_index(task, Path(lm_eval.tasks.__file__).parent, lm_eval.tasks.TaskManager)
        except ServelabError as e:
            raise ServelabError(f"{source}: lm_eval.tasks[{i}]: {e.message}") from None


def _save(results: dict, task_name: str, out_dir: Path, default) -> list[Path]:
    """lm-eval's results JSON and its samples as JSONL (`default` makes lm-eval's objects serializable)."""
    samples = results.pop("samples", {}).get(task_name, [])
    results_path = out_dir / RESULTS_FILE
    results_path.write_text(json.dumps(results, indent=2, default=default))
    samples_path = out_dir / SAMPLES_FILE
    with samples_path.open("w") as f:
        for sample in samples:
            f.write(json.dumps(sample, default=default) + "\n")
    return [results_path, samples_path]


def run_gsm8k(
    target: Target,
    task: WlTask,
    defaults: WlModelArgs | None,
    out_dir: Path,
    dataset_path: Path | None = None,
    *,
    chat: bool = False,
) -> StageOutput:
    try:
        import lm_eval.tasks  # noqa: PLC0415 (the optional `evals` extra)
        from lm_eval.utils import handle_non_serializable  # noqa: PLC0415 (the optional `evals` extra)
    except ImportError:
        raise StageFailed(f"gsm8k: lm-eval is not installed; {INSTALL_HINT}") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    manager, entry = _task_index(task, Path(lm_eval.tasks.__file__).parent, lm_eval.tasks.TaskManager)
    spec = task.name
    if dataset_path is not None:
        spec = str(local_task_config(task, dataset_path, entry.yaml_path, out_dir))
    try:
        with _api_key(target.api_key):
            results = lm_eval.simple_evaluate(
                model="local-chat-completions" if chat else "local-completions",
                model_args=lm_eval_model_args(target, task, defaults, chat),
                tasks=[spec],
                num_fewshot=task.num_fewshot,
                task_manager=manager,
                log_samples=True,
                apply_chat_template=chat,
            )
    except Exception as e:  # lm-eval raises whatever its HTTP client or dataset loader raised
        first_line = (str(e).splitlines() or [""])[0]
        raise StageFailed(f"gsm8k: lm-eval failed: {type(e).__name__}: {first_line}") from e
    if not results or task.name not in results.get("results", {}):
        raise StageFailed(f"gsm8k: lm-eval returned no results for {task.name}")
    artifacts = _save(results, task.name, out_dir, handle_non_serializable)
    metrics = metrics_from_results(results["results"][task.name])
    if "exact_match" not in metrics:
        raise StageFailed(f"gsm8k: lm-eval's results for {task.name} hold no strict-match exact_match")
    metrics["num_questions"] = float(results["n-samples"][task.name]["effective"])
    return StageOutput(metrics=metrics, units={"num_questions": "questions"}, artifacts=artifacts)
