"""Sweep jobs: each InferenceX matrix row (matrix.py) with what servelab runs for it, and a fingerprint.

A job is the row exactly as InferenceX's generator prints it, plus servelab's own fields: the config key, the
rendered launch (argv, env, files), one `servelab bench` run per concurrency of the row, the eval argvs of a
row marked to run evals, the CI queue and the fingerprint. A row servelab cannot run (no engine adapter, a
disaggregated or agentic arm, a runner label missing from runners.yaml) is kept, with `launch` null and
`not-renderable` saying why.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from servelab.errors import ServelabError
from servelab.recipes.client import client_argv, dataset_spec, lm_eval_argv, result_filename
from servelab.recipes.engines import JobPoint, Launch, render
from servelab.recipes.filters import Filters
from servelab.recipes.fingerprint import job_fingerprint
from servelab.recipes.matrix import MODEL_LEN_MARGIN, POINT_FIELDS, Point, matrix, select_keys
from servelab.recipes.schema import LmEval

# The job fields servelab adds beside InferenceX's row fields (a flat JSON job holds both).
SERVELAB_FIELDS = (
    "config-key",
    "fingerprint",
    "image-digest",
    "launch",
    "not-renderable",
    "secret-env",
    "benches",
    "evals",
    "assertions",
    "queue",
    "agents",
)

__all__ = ["MODEL_LEN_MARGIN", "SERVELAB_FIELDS", "Bench", "Job", "build_job", "expand", "select_keys"]


class Bench(BaseModel):
    """One benchmark run of a job: the client at one concurrency."""

    conc: int
    client: list[str] = Field(description="`servelab bench` argv")
    dataset: dict


class Job(BaseModel):
    key: str
    scenario: str
    row: dict = Field(description="InferenceX's matrix row, as its generator prints it")
    image_digest: str | None = None
    launch: Launch | None
    not_renderable: str | None = Field(None, description="why there is no launch (or no client)")
    secret_env: list[str] = Field(default_factory=list)
    benches: list[Bench] = Field(default_factory=list, description="one per concurrency of the row")
    evals: list[list[str]] = Field(default_factory=list, description="eval argvs (GSM8K) when run-eval")
    assertions: dict = Field(default_factory=dict)
    queue: str
    agents: dict[str, str] = Field(default_factory=dict)
    fingerprint: str

    def topology(self) -> str:
        """The layout in a file-name-safe tag: tp8-ep1-dpa0-pp1, or p1x4_d1x8ep8dpa for pools."""
        r = self.row
        if "tp" in r:
            return f"tp{r['tp']}-ep{r['ep']}-dpa{int(r['dp-attn'])}-pp{r['pp']}"

        def pool(w: dict, role: str) -> str:
            return f"{role}{w['num-worker']}x{w['tp']}ep{w['ep']}" + ("dpa" if w["dp-attn"] else "")

        return f"{pool(r['prefill'], 'p')}_{pool(r['decode'], 'd')}"

    def concs(self) -> list[int]:
        conc = self.row["conc"]
        return list(conc) if isinstance(conc, list) else [conc]

    def label(self) -> str:
        concs = ",".join(map(str, self.concs()))
        return f"{self.key} {self.row['exp-name']} {self.topology()} conc{concs}"

    def matrix_entry(self) -> dict:
        """The flat JSON row: InferenceX's fields plus config-key and fingerprint."""
        return {"config-key": self.key, **self.row, "fingerprint": self.fingerprint}

    def to_json(self) -> dict:
        return {
            **self.matrix_entry(),
            "image-digest": self.image_digest,
            "launch": None if self.launch is None else self.launch.model_dump(),
            "not-renderable": self.not_renderable,
            "secret-env": self.secret_env,
            "benches": [b.model_dump() for b in self.benches],
            "evals": self.evals,
            "assertions": self.assertions,
            "queue": self.queue,
            "agents": self.agents,
        }


def _launch(recipe, point: Point) -> tuple[Launch | None, str | None]:
    """The rendered launch, or why there is none."""
    if point.scenario == "agentic-coding":
        return None, "agentic-coding (trace replay) has no servelab launch or client yet"
    try:
        row = point.row
        # flags that depend on concurrency need it; a multinode row holds a list and renders no launch
        conc = row["conc"] if isinstance(row["conc"], int) else None
        job = None if conc is None else JobPoint(isl=row["isl"], osl=row["osl"], conc=conc)
        return render(recipe, point.arm, row["max-model-len"], job=job), None
    except ServelabError as e:
        return None, str(e)


def _benches(key: str, recipe, point: Point, concs: list[int]) -> list[Bench]:
    if point.scenario == "agentic-coding":
        return []
    row, port = point.row, recipe.client.port
    out = []
    for conc in concs:
        dataset = dataset_spec(recipe, point.block, conc)
        if "tp" in row:
            name = result_filename(key, row["exp-name"], point.arm, conc)
        else:
            name = f"{key}_{row['exp-name']}_{_pools(row)}-conc{conc}.json"
        out.append(Bench(conc=conc, client=client_argv(recipe, dataset, conc, port, name), dataset=dataset))
    return out


def _pools(row: dict) -> str:
    p, d = row["prefill"], row["decode"]
    return f"p{p['num-worker']}x{p['tp']}ep{p['ep']}-d{d['num-worker']}x{d['tp']}ep{d['ep']}"


def build_job(store, point: Point) -> Job:
    key, row = point.key, point.row
    recipe = store.recipes[key]
    concs = row["conc"] if isinstance(row["conc"], list) else [row["conc"]]
    launch, why = _launch(recipe, point)
    runner = store.registry.runners.get(recipe.runner)
    if runner is None:
        launch, why = None, f"runner label {recipe.runner!r} is not in {store.registry.source}"
    benches = _benches(key, recipe, point, concs)
    one = len(benches) == 1
    fp = job_fingerprint(
        launch=launch,
        image=recipe.image,
        image_digest=recipe.image_digest,
        client_argv=benches[0].client if one else [b.client for b in benches],
        dataset=benches[0].dataset if one else [b.dataset for b in benches],
        secret_env=recipe.secret_env,
        row={k: v for k, v in row.items() if k not in POINT_FIELDS - {"conc"}},
    )
    # A row for one node of the label (--runner-node-filter) runs on that node's own queue.
    node = row["runner"] if row["runner"] != recipe.runner else None
    queue = node or (runner.queue if runner else recipe.runner)
    agents = {"queue": queue, **(runner.agents if runner and not node else {})}
    evals = []
    if row.get("run-eval") and not ("prefill" in row and point.scenario == "agentic-coding"):
        # Recipes without an lm-eval entry (plain InferenceX imports) get InferenceX's GSM8K, 5-shot.
        lm = [e for e in recipe.evals if e.kind == "lm-eval"] or [LmEval(task="gsm8k", num_fewshot=5)]
        evals = [lm_eval_argv(recipe, e, recipe.client.port) for e in lm]
    return Job(
        key=key,
        scenario=point.scenario,
        row=row,
        image_digest=recipe.image_digest,
        launch=launch,
        not_renderable=why,
        secret_env=recipe.secret_env,
        benches=benches,
        evals=evals,
        assertions={k: v.dump() for k, v in recipe.assertions.items()},
        queue=queue,
        agents=agents,
        fingerprint=fp,
    )


def expand(store, patterns: list[str] | None = None, filters: Filters | None = None) -> list[Job]:
    """The sweep's jobs: InferenceX's rows (matrix.py), each with its launch, benches and fingerprint."""
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
    return [build_job(store, p) for p in points]
