"""`servelab sweep --predict`: each job's benchmark predicted before it runs. A job's client command is a
`servelab bench` run; its prediction is that run's simulated twin (predict/twin.py): the same request stream
(lengths, range ratio, prompts, concurrency, warm-ups, seed) replayed on the job's deployment, which is the
job's model, the system of its runner's node kind, the parallel split of its row, its engine, and the launch
flags that shape scheduling (token budget, running-sequence limit, KV-cache dtype, memory fraction)."""

from pathlib import Path

from servelab.engines.command import grammar_of
from servelab.errors import ServelabError
from servelab.predict.deployment import argv_flags, engine_of_framework, settings_of_argv
from servelab.predict.twin import BenchStream, EngineSettings, simulate_benchmark
from servelab.recipes.sweep import Job
from servelab.recipes.yamlio import load_yaml
from servelab.specs import Parallel, load_model, load_system
from servelab.traffic.lengths import BENCH_RANGE_RATIO

PERCENTILE_METRICS = ["ttft", "tpot", "itl", "e2el"]
PERCENTILES = [50.0, 90.0, 99.0]


def bench_stream(client: list[str]) -> BenchStream:
    """The request stream of a job's `servelab bench` command (bench's defaults where a flag is absent)."""
    f = argv_flags(client)
    if f.get("dataset-name", "random") != "random":
        raise ServelabError(f"dataset {f['dataset-name']} is not simulated (the twin replays random)")
    conc = f.get("max-concurrency")
    return BenchStream(
        random_input_len=int(f.get("random-input-len", 1024)),
        random_output_len=int(f.get("random-output-len", 128)),
        random_range_ratio=float(f.get("random-range-ratio", BENCH_RANGE_RATIO)),
        random_prefix_len=int(f.get("random-prefix-len", 0)),
        num_prompts=int(f.get("num-prompts", 1000)),
        max_concurrency=int(conc) if conc else None,
        request_rate=float(f.get("request-rate", "inf")),
        burstiness=float(f.get("burstiness", 1.0)),
        num_warmups=int(f.get("num-warmups", 0)),
        seed=int(f.get("seed", 0)),
    )


def predict_job(store, job: Job, calibration: Path | None = None) -> dict:
    """The twin's result fields (named as `vllm bench serve` names them) for one job, with where they came
    from; a job that cannot be simulated gets its reason instead."""
    row = job.row
    try:
        if row.get("disagg"):
            raise ServelabError("disaggregated jobs are not simulated")
        if job.launch is None or len(job.benches) != 1:
            raise ServelabError(f"no launch to simulate: {job.not_renderable}")
        if row["spec-decoding"] != "none":
            raise ServelabError(
                f"speculative decoding {row['spec-decoding']} is not simulated (acceptance unknown)"
            )
        try:
            engine = engine_of_framework(row["framework"])
            server = settings_of_argv(job.launch.argv, engine, _options(job, engine))
            settings = EngineSettings(
                engine=engine,
                max_num_batched_tokens=server.max_num_batched_tokens,
                max_num_seqs=server.max_num_seqs,
                gpu_memory_utilization=server.memory_fraction,
            )
        except ValueError as e:
            raise ServelabError(str(e)) from None
        kv = "fp8" if (server.kv_cache_dtype or "").startswith("fp8") else None
        model = load_model(row["model"], kv_dtype=kv)
        system = load_system(store.registry.node_kind(row["runner"]).system)
        parallel = Parallel(tp=row["tp"], ep=row["ep"], dp_attn=row["dp-attn"], pp=row["pp"]).validate(model)
        twin = simulate_benchmark(
            model,
            system,
            parallel,
            settings,
            bench_stream(job.benches[0].client),
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


def predict_jobs(store, jobs: list[Job], calibration: Path | None = None) -> list[dict]:
    """Every job's JSON entry with its prediction under `predicted`."""
    return [{**job.to_json(), "predicted": predict_job(store, job, calibration)} for job in jobs]
