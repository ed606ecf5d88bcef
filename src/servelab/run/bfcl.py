"""The BFCL stage: bfcl-eval's function-calling benchmark against the server under test, as perf-eval runs it.

bfcl-eval pins numpy==1.26.4 and some 30 exact versions, so it lives in its own environment
(scripts/setup_bfcl.sh) and runs as a command there: servelab.run.bfcl_driver, executed by that environment's
python. The python is the `python` argument (`servelab run --bfcl-python`) when given, else the first of
$SERVELAB_BFCL_PYTHON, $SERVELAB_BFCL_VENV/bin/python, ./.venv-bfcl/bin/python (the setup script's default),
or the python of a `bfcl` command on PATH.

The model is registered as a function-calling model reached through chat completions with tools, the
workload's categories are generated and evaluated (max_test_cases: the first N cases of a category in
bfcl-eval's order, split evenly across the leaf categories of a group such as multi_turn), and bfcl-eval's
work folder (its results, scores and the id file) stays in `out_dir` with the driver's log.

Metrics, each accuracy a fraction in [0, 1] from bfcl-eval's score files:
  <category>.accuracy   a leaf category's correct / total; a group's the unweighted mean of its leaves (as
                        bfcl-eval's summary columns such as "Multi Turn Overall Acc" average them)
  <leaf>.accuracy       each leaf of a group as well (multi_turn_base, multi_turn_miss_func, ...)
  <category>.num_cases  the cases evaluated
  overall.accuracy      the unweighted mean of the workload's categories
  overall.inference_errors  cases whose request failed (bfcl-eval scores them as wrong); when every case
                        failed, the server was not answering and the stage fails instead
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from servelab.errors import ServelabError
from servelab.recipes.workload import WlBfcl
from servelab.run.stage import StageFailed, StageOutput, Target

PYTHON_ENV = "SERVELAB_BFCL_PYTHON"
VENV_ENV = "SERVELAB_BFCL_VENV"
DEFAULT_VENV = Path(".venv-bfcl")
DRIVER = Path(__file__).with_name("bfcl_driver.py")
SETUP_HINT = (
    "create it with scripts/setup_bfcl.sh (default ./.venv-bfcl), or name its python with --bfcl-python "
    f"or {PYTHON_ENV}"
)
LOG_FILE = "bfcl.log"
SCORES_FILE = "bfcl_scores.json"


def _shebang_python(script: str) -> Path | None:
    try:
        with open(script, "rb") as f:
            first = f.readline().decode(errors="replace").strip()
    except OSError:
        return None
    return Path(first[2:].split()[0]) if first.startswith("#!") and first[2:].strip() else None


def _found_pythons() -> list[Path | None]:
    venv = os.environ.get(VENV_ENV)
    return [
        Path(p) if (p := os.environ.get(PYTHON_ENV)) else None,
        Path(venv) / "bin" / "python" if venv else None,
        DEFAULT_VENV / "bin" / "python",
        _shebang_python(script) if (script := shutil.which("bfcl")) else None,
    ]


def bfcl_python(python: Path | None = None) -> Path | None:
    """The python of the BFCL environment, or None when there is none (or `python`, given, is not one)."""
    candidates = [python] if python is not None else _found_pythons()
    for candidate in candidates:
        if candidate is not None and candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate.absolute()
    return None


def require_bfcl_python(python: Path | None = None) -> Path:
    """The BFCL environment's python, checked before a run starts its server: without one, bad input."""
    interpreter = bfcl_python(python)
    if interpreter is None:
        if python is not None:
            raise ServelabError(f"{python} is not an executable python", field="bfcl_python")
        raise ServelabError(
            f"the bfcl stage needs a BFCL environment: {SETUP_HINT}; or leave the stage out with --stages"
        )
    return interpreter


def _last_line(log: Path) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()] if log.exists() else []
    return lines[-1].strip() if lines else "no output"


def metrics_from_scores(categories: Sequence[str], result: dict) -> tuple[dict[str, float], dict[str, str]]:
    """servelab's metrics from the driver's {"leaves": {category: [leaf]}, "scores": {leaf: {...}}}."""
    scores, metrics = result["scores"], {}
    for category in categories:
        leaves = result["leaves"].get(category) or []
        missing = [leaf for leaf in leaves if leaf not in scores]
        if not leaves or missing:
            raise StageFailed(f"bfcl: no score for {', '.join(missing or [category])} in bfcl-eval's output")
        accuracies = [scores[leaf]["accuracy"] for leaf in leaves]
        metrics[f"{category}.accuracy"] = sum(accuracies) / len(accuracies)
        metrics[f"{category}.num_cases"] = float(sum(scores[leaf]["total_count"] for leaf in leaves))
        if leaves != [category]:
            for leaf in leaves:
                metrics[f"{leaf}.accuracy"] = float(scores[leaf]["accuracy"])
                metrics[f"{leaf}.num_cases"] = float(scores[leaf]["total_count"])
    overall = [metrics[f"{c}.accuracy"] for c in categories]
    metrics["overall.accuracy"] = sum(overall) / len(overall)
    run = [scores[leaf] for leaf in dict.fromkeys(x for c in categories for x in result["leaves"][c])]
    errors = sum(s.get("inference_errors", 0) for s in run)
    if errors and errors == sum(s["total_count"] for s in run):
        first = next(s["first_error"] for s in run if s.get("first_error"))
        raise StageFailed(f"bfcl: no case reached an answer from the server ({first})")
    metrics["overall.inference_errors"] = float(errors)
    units = {name: "cases" for name in metrics if name.endswith((".num_cases", ".inference_errors"))}
    return metrics, units


def run_bfcl(target: Target, spec: WlBfcl, out_dir: Path, *, python: Path | None = None) -> StageOutput:
    interpreter = bfcl_python(python)
    if interpreter is None:
        raise StageFailed(f"bfcl: no BFCL environment found; {SETUP_HINT}")
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    categories = list(dict.fromkeys(spec.test_categories))
    max_cases = {c: n for c in categories if (n := spec.cases_for(c)) is not None}
    scores_path, log_path = out_dir / SCORES_FILE, out_dir / LOG_FILE
    # -I: the driver's folder (servelab/run, whose bfcl.py would shadow any module named bfcl) and PYTHON*
    # variables such as a PYTHONPATH meant for servelab stay out of the BFCL environment's imports
    argv = [str(interpreter), "-I", str(DRIVER), "--model", target.model]
    for category in categories:
        argv += ["--category", category]
    argv += [
        "--num-threads", str(spec.num_threads),
        "--temperature", str(spec.temperature),
        "--maximum-step-limit", str(spec.maximum_step_limit),
        "--max-cases", json.dumps(max_cases),
        "--out", str(scores_path),
    ]  # fmt: skip
    env = os.environ | {
        "BFCL_PROJECT_ROOT": str(out_dir),  # bfcl-eval's results, scores and id file
        "OPENAI_BASE_URL": target.request_url().rstrip("/") + "/v1",
        "OPENAI_API_KEY": target.api_key or "EMPTY",  # the OpenAI client refuses to start without one
    }
    with (
        log_path.open("w") as log,
        subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT) as proc,
    ):
        try:
            proc.wait()
        except BaseException:
            # Ctrl-C (or any other exception) ends the driver, and waits for it: subprocess.run gives a child
            # it killed on KeyboardInterrupt only a quarter of a second, so on a busy machine it could outlive
            # servelab as a zombie, reaped by init later
            proc.kill()
            proc.wait()
            raise
    if proc.returncode != 0 or not scores_path.is_file():
        raise StageFailed(
            f"bfcl: bfcl-eval exited with code {proc.returncode}: {_last_line(log_path)} (log: {log_path})"
        )
    metrics, units = metrics_from_scores(categories, json.loads(scores_path.read_text()))
    artifacts = [scores_path, log_path] + [p for p in (out_dir / "result", out_dir / "score") if p.exists()]
    return StageOutput(metrics=metrics, units=units, artifacts=artifacts)
