"""Predicted against measured: a measured run's bench metrics beside a prediction of the same benchmark, with
the error of the prediction in % ((predicted - measured) / measured).

The prediction is either a predicted run in the store (a twin's result file imported with `results import`,
whose metrics are stored as source=predicted) or the twin made now: the run's recorded deployment (its server
command and GPU, servelab.predict.deployment) replaying its benchmark's request stream (the flags in the
`servelab bench` result file the stage kept; for other result files the measured mean lengths, no length
spread, all its prompts and its concurrency). Both sides are paired by bench config; a side with a single
config pairs with the other's single config whatever their names.
"""

import fnmatch
import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from servelab.engines import with_engine_kv
from servelab.errors import ServelabError
from servelab.predict.deployment import (
    engine_of_argv,
    engine_settings_of_argv,
    kv_dtype_of_argv,
    model_of_argv,
    parallel_of_argv,
    system_of_gpu,
)
from servelab.predict.twin import BenchStream, EngineSettings, simulate_benchmark
from servelab.results.store import Run, Store
from servelab.specs import load_model, load_system
from servelab.traffic.lengths import BENCH_RANGE_RATIO

# what a prediction is judged on: latencies, duration and throughputs (not counts or settings)
JUDGED = re.compile(r"(_ms|^duration|_throughput)$")
PERCENTILE_METRICS = ["ttft", "tpot", "itl", "e2el"]
PERCENTILES = [50.0, 90.0, 99.0]

Values = dict[str, dict[str, tuple[float, str]]]  # config -> metric -> (median over repetitions, unit)


@dataclass(frozen=True)
class Pair:
    config: str
    metric: str
    unit: str
    predicted: float
    measured: float
    error_pct: float | None  # None when the measured value is 0


@dataclass(frozen=True)
class PredictedVsMeasured:
    measured: str  # run id
    predicted_by: str  # a run id, or the twin's engine profile
    rows: list[Pair]


def bench_values(store: Store, run: Run, source: str | None = None) -> Values:
    """A run's bench metrics per config (median over repetitions), optionally of one metric source."""
    raw: dict[str, dict[str, list[float]]] = {}
    units: dict[tuple[str, str], str] = {}
    for m in store.metrics(run.id):
        if m.stage != "bench" or m.value is None or (source and m.source != source):
            continue
        raw.setdefault(m.config, {}).setdefault(m.name, []).append(m.value)
        units[(m.config, m.name)] = m.unit
    return {
        config: {name: (statistics.median(v), units[(config, name)]) for name, v in metrics.items()}
        for config, metrics in raw.items()
    }


def _pairs(predicted: Values, measured: Values, patterns: list[str]) -> list[Pair]:
    configs = [(c, c) for c in sorted(measured.keys() & predicted.keys())]
    if not configs and len(measured) == 1 and len(predicted) == 1:
        configs = [(next(iter(measured)), next(iter(predicted)))]
    rows = []
    for m_config, p_config in configs:
        m, p = measured[m_config], predicted[p_config]
        for name in sorted(m.keys() & p.keys()):
            if not JUDGED.search(name) or (patterns and not any(fnmatch.fnmatch(name, x) for x in patterns)):
                continue
            pred, (meas, unit) = p[name][0], m[name]
            error = (pred - meas) / abs(meas) * 100.0 if meas else None
            rows.append(Pair(m_config, name, unit, pred, meas, error))
    return rows


def against_run(
    store: Store, measured_ref: str, predicted_ref: str, patterns: list[str]
) -> PredictedVsMeasured:
    """A measured run against a predicted run of the store."""
    measured, predicted = store.get_run(measured_ref), store.get_run(predicted_ref)
    m_values = bench_values(store, measured)
    p_values = bench_values(store, predicted, source="predicted")
    if not p_values:
        raise ServelabError(
            f"run {predicted.id} holds no predicted bench metrics (import a twin's result file)"
        )
    rows = _pairs(p_values, m_values, patterns)
    if not rows:
        raise ServelabError(f"runs {measured.id} and {predicted.id} share no bench config and metric")
    return PredictedVsMeasured(measured.id, predicted.id, rows)


def _stream(store: Store, run: Run, config: str, values: dict[str, tuple[float, str]]) -> BenchStream:
    """The request stream of a measured bench stage: its servelab bench result's own flags, else what the
    metrics and config say."""
    for stage in store.stages(run.id):
        if stage.stage == "bench" and stage.config == config and stage.artifact:
            try:
                result = json.loads(store.artifact_path(run.id, stage.artifact).read_text())
                cfg, client = result.get("config"), result.get("client")
            except (OSError, ValueError, AttributeError):
                cfg, client = None, None
            if isinstance(cfg, dict) and cfg.get("dataset_name") == "random":
                fields = {name: cfg[name] for name in BenchStream.__dataclass_fields__ if name in cfg}
                fields["request_rate"] = float(fields.get("request_rate", math.inf))
                # the worker processes the run started, each sending its own share of the requests (a
                # simulated result's client has none: its flags stand)
                started = client.get("num_workers") if isinstance(client, dict) else None
                if isinstance(started, int) and started > 0:
                    fields["num_workers"] = started
                return BenchStream(**fields)
    need = ("completed", "total_input_tokens", "total_output_tokens")
    conc = re.search(r"-conc-(\d+)$", config)
    if any(k not in values for k in need) or not conc or values["completed"][0] < 1:
        raise ServelabError(
            f"run {run.id} {config}: the benchmark's flags are unknown (no servelab bench result file, "
            "and no completed / token totals / concurrency to rebuild them)"
        )
    done = values["completed"][0]
    return BenchStream(
        random_input_len=max(1, round(values["total_input_tokens"][0] / done)),
        random_output_len=max(1, round(values["total_output_tokens"][0] / done)),
        random_range_ratio=BENCH_RANGE_RATIO,
        random_prefix_len=0,
        num_prompts=int(done + values.get("failed", (0.0, ""))[0]),
        max_concurrency=int(conc.group(1)),
        request_rate=math.inf,
    )


def twin_values(store: Store, run: Run, measured: Values, calibration: Path | None) -> tuple[Values, str]:
    """The twin of each measured bench config of a run, and the engine profile that priced it."""
    argv = run.provenance.server_argv
    if not argv:
        raise ServelabError(
            f"run {run.id} recorded no server command: its deployment is unknown; "
            "compare it with --predicted RUN"
        )
    try:
        engine = engine_of_argv(argv)
        kv_dtype = kv_dtype_of_argv(argv)
        model = load_model(model_of_argv(argv, engine), kv_dtype=kv_dtype)
        parallel = parallel_of_argv(argv, engine, model.is_moe).validate(model)
        system = load_system(system_of_gpu(run.provenance.gpu))
        if kv_dtype is None:  # the launch named none: the engine's own pick where it makes one
            model = with_engine_kv(model, engine, system.compute_capability)
        settings = EngineSettings(engine=engine, **engine_settings_of_argv(argv))
    except ValueError as e:
        raise ServelabError(f"run {run.id}: cannot simulate its deployment: {e}") from None
    out: Values = {}
    profile = ""
    for config, values in measured.items():
        stream = _stream(store, run, config, values)
        twin = simulate_benchmark(
            model,
            system,
            parallel,
            settings,
            stream,
            PERCENTILE_METRICS,
            PERCENTILES,
            {},
            calibration=calibration,
        )
        profile = twin.provenance["engine_profile"]
        out[config] = {
            k: (float(v), "") for k, v in twin.summary.fields().items() if isinstance(v, int | float)
        }
    return (
        out,
        f"twin ({model.name} {parallel.label()} on {system.name}, {engine}; engine profile: {profile})",
    )


def find_twin(store: Store, run: Run) -> Run | None:
    """The newest predicted run of the same name that pairs with `run` (a shared bench config, or one
    config on each side)."""
    measured = bench_values(store, run)
    for other in store.list_runs(name=run.name):
        if other.id != run.id and _pairs(bench_values(store, other, source="predicted"), measured, []):
            return other
    return None


def against_twin(
    store: Store, measured_ref: str, patterns: list[str], calibration: Path | None = None
) -> PredictedVsMeasured:
    """A measured run against its twin: a predicted run of the store when there is one (and no calibration is
    asked for), else the twin simulated now."""
    run = store.get_run(measured_ref)
    measured = bench_values(store, run)
    if not measured:
        raise ServelabError(f"run {run.id} has no bench metrics to compare")
    found = find_twin(store, run) if calibration is None else None
    if found is not None:
        return against_run(store, run.id, found.id, patterns)
    predicted, by = twin_values(store, run, measured, calibration)
    return PredictedVsMeasured(run.id, by, _pairs(predicted, measured, patterns))
