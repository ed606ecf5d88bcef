"""`servelab sweep --predict`: each job's benchmark predicted before it runs. A job's benchmark point is a
typed `servelab bench` spec; its prediction is that run's simulated twin (predict/twin.py): the same request
stream (lengths, range ratio, prompts, concurrency, warm-ups, seed) replayed on the job's deployment, which is
the job's model, the system of its runner's node kind, the parallel split of its row, its engine, and the
launch flags that shape scheduling (token budget, running-sequence limit, KV-cache dtype, memory fraction)."""

from collections.abc import Callable
from pathlib import Path

from servelab.bench.spec import BenchSpec
from servelab.engines import with_engine_kv
from servelab.engines.command import grammar_of
from servelab.errors import ServelabError
from servelab.predict.deployment import engine_of_framework, engine_settings_of, settings_of_argv
from servelab.predict.twin import BenchStream, EngineSettings, simulate_benchmark
from servelab.recipes.sweep import Job
from servelab.recipes.yamlio import load_yaml
from servelab.specs import ENGINE_KV_CACHE_DTYPES, Parallel, load_model, load_system

PERCENTILE_METRICS = ["ttft", "tpot", "itl", "e2el"]
PERCENTILES = [50.0, 90.0, 99.0]


def bench_stream(bench: BenchSpec) -> BenchStream:
    """The request stream of a job's benchmark point (bench's defaults where the spec sets nothing)."""
    if bench.dataset_name != "random":
        raise ServelabError(f"dataset {bench.dataset_name} is not simulated (the twin replays random)")
    cfg = bench.config()
    return BenchStream(
        random_input_len=cfg.random_input_len,
        random_output_len=cfg.random_output_len,
        random_range_ratio=cfg.random_range_ratio,
        random_range_rule=cfg.random_range_rule,
        random_prefix_len=cfg.random_prefix_len,
        num_prompts=cfg.num_prompts,
        max_concurrency=cfg.max_concurrency,
        request_rate=cfg.request_rate,
        burstiness=cfg.burstiness,
        num_warmups=cfg.num_warmups,
        seed=cfg.seed,
    )


def predict_job(store, job: Job, calibration: Path | None = None) -> dict:
    """The twin's result fields (named as `vllm bench serve` names them) for one job, with where they came
    from; a job that cannot be simulated gets its reason instead."""
    row = job.point
    try:
        if row.disagg:
            raise ServelabError("disaggregated jobs are not simulated")
        if job.launch is None or len(job.benches) != 1:
            raise ServelabError(f"no launch to simulate: {job.not_renderable}")
        if row.spec_decoding != "none":
            raise ServelabError(
                f"speculative decoding {row.spec_decoding} is not simulated (acceptance unknown)"
            )
        try:
            engine = engine_of_framework(row.framework)
            server = settings_of_argv(job.launch.argv, engine, _options(job, engine))
            settings = EngineSettings(engine=engine, **engine_settings_of(server))
        except ValueError as e:
            raise ServelabError(str(e)) from None
        # the server's --kv-cache-dtype; auto (or none) keeps the checkpoint's declared format or its dtype
        kv = ENGINE_KV_CACHE_DTYPES.get((server.kv_cache_dtype or "auto").lower())
        model = load_model(row.model, kv_dtype=kv.value if kv is not None else None)
        system = load_system(store.runner_labels.node_kind(row.runner).system)
        if kv is None:  # auto: the engine's own pick where it makes one
            model = with_engine_kv(model, engine, system.compute_capability)
        parallel = Parallel(tp=row.tp, ep=row.ep, dp_attn=row.dp_attn, pp=row.pp).validate(model)
        twin = simulate_benchmark(
            model,
            system,
            parallel,
            settings,
            bench_stream(job.benches[0]),
            PERCENTILE_METRICS,
            PERCENTILES,
            {},
            calibration=calibration,
        )
    except ServelabError as e:
        return {"source": "predicted", "error": str(e)}
    return {
        "source": "predicted",
        "by": "servelab bench --simulate (serving simulator)",
        "engine_profile": twin.provenance["engine_profile"],
        "ops_by_source": twin.provenance["ops_by_source"],
        "kernel_time_by_source": twin.provenance["kernel_time_by_source"],
        **twin.summary.fields(),
    }


def _options(job: Job, engine) -> dict | None:
    """The options file a job's launch names (TensorRT-LLM's YAML), parsed; None when it names none."""
    assert job.launch is not None
    path = grammar_of(engine).options_path(job.launch.argv)
    text = job.launch.files.get(path) if path else None
    return (load_yaml(text, path) or {}) if text is not None and path else None


def predict_jobs(
    store, jobs: list[Job], calibration: Path | None = None, done: Callable[[], None] | None = None
) -> list[dict]:
    """Every job's JSON entry with its prediction under `predicted`; `done` is called after each job (a
    progress line's count)."""
    out = []
    for job in jobs:
        out.append({**job.to_json(), "predicted": predict_job(store, job, calibration)})
        if done is not None:
            done()
    return out
