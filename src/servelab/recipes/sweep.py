"""Sweep jobs: each InferenceX matrix row (matrix.py) with what servelab runs for it, and a fingerprint.

A job (recipes/job.py) is the row exactly as InferenceX's generator prints it, plus servelab's own fields: the
config key, the rendered launch (argv, env, files), one typed benchmark point per concurrency of the row, the
typed evals of a row marked to run them, the CI queue and the fingerprint. A row servelab cannot run (no
engine adapter, a disaggregated or agentic arm, a runner label missing from runners.yaml) is kept, with
`launch` null and `not-renderable` saying why.
"""

from __future__ import annotations

from servelab.bench.spec import BenchSpec
from servelab.errors import ServelabError
from servelab.recipes import amd_disagg, llmd, tilert
from servelab.recipes.checkout_launch import LaunchOrigin
from servelab.recipes.client import bench_spec, eval_spec, result_filename, script_client, trace_spec
from servelab.recipes.engines import JobPoint, Launch, render
from servelab.recipes.engines.profiles import AGENTIC
from servelab.recipes.filters import Filters
from servelab.recipes.fingerprint import dataset_of, job_fingerprint
from servelab.recipes.inferencex import OlderAgenticArm
from servelab.recipes.job import SERVELAB_FIELDS, Job
from servelab.recipes.matrix import MODEL_LEN_MARGIN, POINT_FIELDS, MatrixRow, Point, matrix, select_keys
from servelab.recipes.recipe_store import benchmarks_of
from servelab.recipes.schema import LmEval
from servelab.recipes.srtslurm_jobs import deployment_for

__all__ = ["MODEL_LEN_MARGIN", "SERVELAB_FIELDS", "Job", "JobCache", "build_job", "expand", "select_keys"]


def _launch(store, recipe, point: Point) -> tuple[Launch | None, str | None, LaunchOrigin | None]:
    """The rendered launch, or why there is none, and where it comes from when the store's checkout holds
    another script than the one its launch flags were captured from (checkout_launch.py)."""
    row = MatrixRow.model_validate(point.row)
    agentic = point.scenario == AGENTIC
    if agentic and (row.multinode or not isinstance(row.conc, int)):
        return None, "agentic-coding: a multinode agentic deployment has no servelab launch yet", None
    if isinstance(point.arm, OlderAgenticArm) and point.arm.offloading != "none":
        why = (
            f"agentic-coding offloading: {point.arm.offloading} (InferenceX's form before June 2026) has no "
        )
        return None, why + "servelab launch; today's form says kv-offloading and kv-offload-backend", None
    if not agentic and row.max_model_len is None:
        return None, "the row has no max-model-len", None
    # flags that depend on concurrency need it; a multinode row holds a list and renders no launch
    conc = row.conc if isinstance(row.conc, int) else None
    job = None
    if agentic:
        # upstream's agentic scripts run the model at its native context (no max model length) and size
        # DRAM KV offload from the row's tier and budget
        job = JobPoint(
            conc=conc,
            scenario=AGENTIC,
            kv_offloading=row.kv_offloading,
            total_cpu_dram_gb=row.total_cpu_dram_gb,
        )
    elif conc is not None:
        job = JobPoint(isl=row.isl, osl=row.osl, conc=conc)
    origin = None
    try:
        origin = _origin(store, recipe, point, row)
        if origin is not None and origin.extras is not None:
            try:
                return (
                    render(recipe, point.arm, row.max_model_len, job=job, extra=origin.extras),
                    None,
                    origin,
                )
            except ServelabError as e:
                origin = store.checkout.failed(origin, f"what it launched cannot be rendered: {e}")
        return render(recipe, point.arm, row.max_model_len, job=job), None, origin
    except ServelabError as e:
        return None, str(e), origin


def _origin(store, recipe, point: Point, row: MatrixRow) -> LaunchOrigin | None:
    """A single-node job's launch as the checkout's script gives it, where that differs from the shipped
    one."""
    checkout = getattr(store, "checkout", None)
    if checkout is None or point.arm.disagg or not isinstance(row.conc, int) or row.multinode:
        return None
    return checkout.origin(recipe, point.arm, row)


def _benches(key: str, recipe, point: Point, concs: list[int]) -> list[BenchSpec]:
    row = MatrixRow.model_validate(point.row)
    if point.scenario == AGENTIC:
        if row.duration is None:
            return []
        if row.prefill is None or row.decode is None:
            if len(concs) != 1:
                return []
            name = result_filename(key, row.exp_name, point.arm, concs[0])
            return [trace_spec(recipe, concs[0], row.duration, name)]
        pools = _pools(row.prefill, row.decode)
        # a multinode row's concurrencies replay one after another against its one deployment, each saved
        # as upstream's multinode agentic client names it: the job's result name with `_conc<N>`
        # (amd_utils/trace_replay.sh, agentic_srt.sh)
        return [
            trace_spec(recipe, conc, row.duration, f"{key}_{row.exp_name}_{pools}_conc{conc}.json")
            for conc in concs
        ]
    out = []
    for conc in concs:
        if row.prefill is None or row.decode is None:
            name = result_filename(key, row.exp_name, point.arm, conc)
        else:
            name = f"{key}_{row.exp_name}_{_pools(row.prefill, row.decode)}-conc{conc}.json"
        script = script_client(recipe, point.arm, point.block, conc)
        out.append(bench_spec(recipe, point.block, conc, name, script))
    return out


def _pools(p, d) -> str:
    """A disaggregated row's pools in its result names: workers x TP and EP of prefill and decode."""
    return f"p{p.num_worker}x{p.tp}ep{p.ep}-d{d.num_worker}x{d.tp}ep{d.ep}"


def build_job(store, point: Point) -> Job:
    key, row = point.key, point.row
    typed = MatrixRow.model_validate(row)
    recipe = store.recipes[key]
    launch, why, origin = _launch(store, recipe, point)
    deployment, source = None, origin.source if origin else None
    if launch is None:  # a multinode job srt-slurm deploys (srtslurm_jobs.py)
        deployment, srt_why, srt_source = deployment_for(row, benchmarks_of(store.source))
        why, source = (None, srt_source) if deployment else (srt_why or why, source)
    # one deployed by InferenceX's AMD scripts, TileRT's or llm-d's (each rendered from a capture of them)
    for captured in (amd_disagg, tilert, llmd):
        if launch is None and deployment is None:
            deployment, captured_why = captured.deployment_for(key, row)
            why = None if deployment else (captured_why or why)
    runner = store.runner_labels.runners.get(recipe.runner)
    if runner is None:
        launch, deployment = None, None
        why = f"runner label {recipe.runner!r} is not in {store.runner_labels.source}"
    benches = _benches(key, recipe, point, typed.concs)
    one = len(benches) == 1
    fp = job_fingerprint(
        launch=launch,
        deployment=deployment,
        image=recipe.image,
        image_digest=recipe.image_digest,
        client_argv=benches[0].argv() if one else [b.argv() for b in benches],
        dataset=dataset_of(benches[0]) if one else [dataset_of(b) for b in benches],
        secret_env=recipe.secret_env,
        row={k: v for k, v in row.items() if k not in POINT_FIELDS - {"conc"}},
    )
    # A row for one node of the label (--runner-node-filter) runs on that node's own queue.
    node = typed.runner if typed.runner != recipe.runner else None
    queue = node or (runner.queue if runner else recipe.runner)
    agents = {"queue": queue, **(runner.agents if runner and not node else {})}
    evals = []
    if typed.run_eval and not (typed.multinode and point.scenario == "agentic-coding"):
        # Recipes without an lm-eval entry (plain InferenceX imports) get InferenceX's GSM8K, 5-shot.
        lm = [e for e in recipe.evals if e.kind == "lm-eval"] or [LmEval(task="gsm8k", num_fewshot=5)]
        evals = [eval_spec(recipe, e) for e in lm]
    return Job(
        key=key,
        scenario=point.scenario,
        row=row,
        image_digest=recipe.image_digest,
        launch=launch,
        deployment=deployment,
        not_renderable=why,
        secret_env=recipe.secret_env,
        benches=benches,
        evals=evals,
        assertions=dict(recipe.assertions),
        queue=queue,
        agents=agents,
        fingerprint=fp,
        launch_script_changed=origin.change if origin else None,
        launch_source=source,
        launch_derive_failed=origin.failed if origin else None,
    )


class JobCache:
    """Jobs already built, by everything build_job reads, so that sweeping many snapshots of one repository
    (scripts/refresh_inferencex_refs.py compare: 25 snapshots, most recipes unchanged between them) builds
    each distinct point once. build_job reads the point (config key, scenario, block, arm, row), the store's
    recipe of that key, its runner label's queue and agents (or, where the label is missing, the runners
    file's name) and the checkout's launch and srt-slurm scripts; the rest is servelab's own data. A store
    with a checkout is not cached: the key does not hold its scripts. The jobs are shared: read, never
    changed."""

    def __init__(self) -> None:
        self.jobs: dict[tuple, Job] = {}
        self.hits = 0
        self._store, self._cached = None, False
        # the current store's models written out, by id (each held, so that no other takes its id)
        self._written: dict[int, tuple[object, str]] = {}

    def build(self, store, point: Point) -> Job:
        if store is not self._store:
            self._store, self._written = store, {}
            self._cached = store.checkout is None and benchmarks_of(store.source) is None
        if not self._cached:
            return build_job(store, point)
        recipe = store.recipes[point.key]
        runner = store.runner_labels.runners.get(recipe.runner)
        inputs = (
            point.key,
            point.scenario,
            repr(point.row),
            self._of(recipe),
            self._of(point.block),
            self._of(point.arm),
            store.runner_labels.source if runner is None else repr((runner.queue, runner.agents)),
        )
        job = self.jobs.get(inputs)
        if job is None:
            job = self.jobs[inputs] = build_job(store, point)
        else:
            self.hits += 1
        return job

    def _of(self, model) -> str:
        """A model's values and which of its fields were written, at every level (renderers read both: a
        model's `dump()` holds only the fields written)."""
        held = self._written.get(id(model))
        if held is None:
            text = repr((model.model_dump(), model.model_dump(exclude_unset=True)))
            held = self._written[id(model)] = (model, text)
        return held[1]


def expand(
    store,
    patterns: list[str] | None = None,
    filters: Filters | None = None,
    cache: JobCache | None = None,
) -> list[Job]:
    """The sweep's jobs: InferenceX's rows (matrix.py), each with its launch, benches and fingerprint;
    with `cache`, a point built before (by another store) takes the job built then."""
    f = filters or Filters()
    if f.mode == "test-config" and not patterns:
        raise ServelabError("test-config mode needs config keys (globs allowed)")
    points = matrix(store, patterns, f)
    if len(points) > f.max_jobs:
        per_key: dict[str, int] = {}
        for p in points:
            per_key[p.key] = per_key.get(p.key, 0) + 1
        biggest = max(per_key, key=lambda k: per_key[k])
        raise ServelabError(
            f"{biggest}: the sweep expands to {len(points)} jobs ({per_key[biggest]} from this recipe), "
            f"above the limit of {f.max_jobs}; narrow it with filters or raise --max-jobs"
        )
    try:
        build = build_job if cache is None else cache.build
        return [build(store, p) for p in points]
    finally:
        if getattr(store, "checkout", None) is not None:
            store.checkout.close()
