"""Read what `servelab run` was given (a workload file, a job file, or a recipe key with its arm and
concurrency) and build its plan."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from servelab.errors import ServelabError
from servelab.recipes.filters import Filters
from servelab.recipes.job import AGENTIC_TRACE_ENV
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import Job, expand
from servelab.recipes.workload import is_workload, parse_workload
from servelab.recipes.yamlio import read_text, read_yaml
from servelab.run.plan import RunPlan, from_job, from_workload, pick_job

JOBS_SCHEMA = "servelab.jobs"  # the --json answer of `servelab sweep` and `servelab changelog jobs`


def read_job(path: Path, index: int | None) -> Job:
    """One job of a `servelab sweep --format json` file (a list of jobs, or one job object), or of a
    `servelab sweep --json` answer (its `jobs`)."""
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise ServelabError(f"{path}: not JSON ({e.msg}, line {e.lineno})", field="job") from None
    except RecursionError:
        raise ServelabError(f"{path}: nested too deeply for a job file", field="job") from None
    if isinstance(data, dict) and data.get("schema") == JOBS_SCHEMA and isinstance(data.get("jobs"), list):
        data = data["jobs"]
    if isinstance(data, list):
        if index is None and len(data) != 1:
            raise ServelabError(f"{path} holds {len(data)} jobs; choose one with --job-index", field="job")
        i = index or 0
        if not 0 <= i < len(data):
            raise ServelabError(f"{path} holds {len(data)} jobs; no index {i}", field="job_index")
        data = data[i]
    elif index not in (None, 0):
        raise ServelabError(f"{path} holds one job; no index {index}", field="job_index")
    if not isinstance(data, dict):
        raise ServelabError(f"{path}: expected a job object of `servelab sweep --format json`", field="job")
    return Job.from_json(data, str(path))


def plan_from(
    source: str | None,
    *,
    job: Path | None = None,
    job_index: int | None = None,
    arm: str | None = None,
    conc: int | None = None,
    seq_len: str | None = None,
    directory: Path | None = None,
    stages: list[str] | None = None,
    repetitions: int | None = None,
    assertions: Sequence[str] = (),
    port: int = 8000,
    image: str | None = None,
) -> tuple[RunPlan, str | None]:
    """The plan, and the perf-eval GPU profile where the source names one."""
    kw = {"stages": stages, "repetitions": repetitions, "assertions": assertions}
    # an agentic-coding job's trace: the user's file (the job's script checks it first)
    trace = os.environ.get(AGENTIC_TRACE_ENV)
    if job is not None:
        if source is not None:
            raise ServelabError("give a workload file, a recipe key or --job, not two of them", field="job")
        return from_job(read_job(job, job_index), str(job), trace=trace, **kw), None  # type: ignore[arg-type]
    if source is None:
        raise ServelabError(
            "nothing to run: give a workload file, a recipe key, or --job FILE", field="source"
        )
    if Path(source).is_file():
        data = read_yaml(source)
        if not is_workload(data):
            raise ServelabError(f"{source}: not a perf-eval workload file (name, gpu, vllm)", field="source")
        w = parse_workload(data, source)
        return from_workload(w, source, port=port, image=image, **kw), w.gpu  # type: ignore[arg-type]
    if conc is None:
        raise ServelabError(f"{source} is not a file; running a recipe key needs --conc", field="conc")
    try:
        filters = Filters(mode="test-config", conc=[conc], no_evals=False)
    except ValidationError as e:
        raise ServelabError.from_validation(e, as_options=True) from None
    store = open_store(directory)
    jobs = expand(store, [source], filters)
    if not jobs:
        raise ServelabError(f"{source}: no arm runs at concurrency {conc}", field="conc")
    picked = pick_job(jobs, source, arm, seq_len)
    recipe = store.recipes[picked.key]
    return from_job(picked, f"recipe {picked.key}", trace=trace, **kw), recipe.gpu_profile  # type: ignore[arg-type]
