"""Rows of the results store as calibration rows.

A bench stage of a run is a row when the store says what deployment it measured and what it measured:
- measured (or imported `vllm bench serve` results) with the server's command line in the run's provenance:
  the engine, model and parallel split come from that argv (servelab.calibrate.deployment), the system from
  the recorded GPU name, the concurrency from the stage config (`<label>-conc-N`), the mean prompt and output
  lengths from total_input_tokens, total_output_tokens and completed, and the measured median TTFT and TPOT
  from median_ttft_ms and median_tpot_ms;
- imported InferenceX results: their copied file (the stage artifact) is read as `--from-inferencex` reads it,
  since the file names the whole deployment;
- predicted results (a simulated twin) are never rows: a fit on the predictor's own output proves nothing.
Rows lacking any of these are counted by reason.
"""

import hashlib
import re
from pathlib import Path

from servelab.calibrate import inferencex_rows
from servelab.calibrate.rows import Case
from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.predict.deployment import (
    engine_of_argv,
    model_of_argv,
    parallel_of_argv,
    system_of_gpu,
)
from servelab.results.location import server_url
from servelab.results.store import Metric, Run, Store
from servelab.specs import load_model
from servelab.specs.families import family_of

REQUIRED = ("median_ttft_ms", "median_tpot_ms", "completed", "total_input_tokens", "total_output_tokens")


def _count(skipped: dict[str, int], reason: str) -> None:
    skipped[reason] = skipped.get(reason, 0) + 1


def _stage_case(run: Run, config: str, rep: int, values: dict[str, float]) -> Case:
    """One measured bench stage with the run's server argv as a Case, or ValueError saying what is missing."""
    argv = run.provenance.server_argv
    if not argv:
        raise ValueError("no server command recorded (the deployment is unknown)")
    missing = [k for k in REQUIRED if k not in values]
    if missing:
        raise ValueError(f"bench metrics lack {', '.join(missing)}")
    conc = re.search(r"-conc-(\d+)$", config)
    if not conc:
        raise ValueError("no max concurrency (an open-loop run, config <label>-rate-R)")
    engine = engine_of_argv(argv)
    checkpoint = model_of_argv(argv, engine)
    try:
        model = load_model(checkpoint)
    except ServelabError:
        raise ValueError(f"model {checkpoint} is not embedded") from None
    completed = values["completed"]
    if completed < 1:
        raise ValueError("no completed requests")
    return Case(
        row_id=f"{run.id}/{config}/{rep}",
        family=family_of(model.name),
        engine=Engine(engine),
        version=run.provenance.servelab_version or "?",
        model=model,
        parallel=parallel_of_argv(argv, engine, model.is_moe),
        concurrency=int(conc.group(1)),
        isl=max(1, round(values["total_input_tokens"] / completed)),
        osl=max(1, round(values["total_output_tokens"] / completed)),
        ttft_ms=values["median_ttft_ms"],
        tpot_ms=values["median_tpot_ms"],
        source=f"store run {run.id}",
        system=system_of_gpu(run.provenance.gpu),
    )


def _bench_values(metrics: list[Metric]) -> dict[tuple[str, int], tuple[str, dict[str, float]]]:
    """(config, repetition) -> (metric source, {name: value}) of a run's bench stage."""
    out: dict[tuple[str, int], tuple[str, dict[str, float]]] = {}
    for m in metrics:
        if m.stage != "bench" or m.value is None:
            continue
        source, values = out.setdefault((m.config, m.repetition), (m.source, {}))
        values[m.name] = m.value
    return out


def _inferencex_items(store: Store, run: Run) -> list[dict] | None:
    """The rows of an imported InferenceX file (the run's copied bench artifact); None for other runs."""
    if run.provenance.server_argv or not run.source_sha256:
        return None
    for artifact in sorted({s.artifact for s in store.stages(run.id) if s.stage == "bench" and s.artifact}):
        path = store.root / artifact
        try:
            items = inferencex_rows.read_items(path)
        except ServelabError:
            continue
        if any("hw" in item for item in items):
            return items
    return None


def _add(cases: list[Case], skipped: dict[str, int], digest, make, *args) -> None:
    try:
        case = make(*args)
    except ValueError as e:
        _count(skipped, str(e))
        return
    digest.update(f"{case.row_id} {case.ttft_ms!r} {case.tpot_ms!r}\n".encode())
    cases.append(case)


def store_cases(path: Path | str) -> tuple[list[Case], dict[str, int], str]:
    """Every usable bench row of the store at `path` (an SQLite file, or a PostgreSQL store's URL), the rows
    left out by reason, and a SHA-256 of the rows used (row id and the two measured values), which names this
    input in a calibration's provenance however the store grows afterwards."""
    if server_url(path, "from_store") is None and not Path(path).is_file():
        raise ServelabError(f"{path}: no such results store", field="from_store")
    cases: list[Case] = []
    skipped: dict[str, int] = {}
    digest = hashlib.sha256()
    with Store.open(path) as store:
        for run in store.list_runs():
            bench = _bench_values(store.metrics(run.id))
            items = _inferencex_items(store, run) if bench else None
            if items is not None:
                where = f"store run {run.id} (InferenceX import)"
                for i, item in enumerate(items):
                    _add(cases, skipped, digest, inferencex_rows.to_case, item, f"{run.id}#{i}", where)
                continue
            for (config, rep), (source, values) in sorted(bench.items()):
                if source == "predicted":
                    _count(skipped, "predicted by servelab (a simulated twin), not measured")
                    continue
                _add(cases, skipped, digest, _stage_case, run, config, rep, values)
    return cases, skipped, digest.hexdigest()
