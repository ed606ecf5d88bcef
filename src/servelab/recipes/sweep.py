"""Sweep expansion: recipes x filters -> jobs (one per concurrency), each rendered and fingerprinted.

Follows InferenceX's generator: keys by glob, filters on model prefix / precision / framework / runner /
seq-lens / concurrency / tp / ep, full-sweep and test-config modes, eval marking, trimming to the lowest
concurrency.
"""

from __future__ import annotations

import fnmatch

from pydantic import BaseModel, Field

from servelab.errors import ServelabError, closest
from servelab.recipes.client import client_argv, dataset_spec, lm_eval_argv, result_filename
from servelab.recipes.engines import JobPoint, Launch, render
from servelab.recipes.filters import Filters
from servelab.recipes.fingerprint import job_fingerprint
from servelab.recipes.ladder import concurrencies, seq_len_name
from servelab.recipes.schema import LmEval

# Eval marking (InferenceX): only 8k/1k rows at concurrency >= 16 qualify.
EVAL_ISL, EVAL_OSL, EVAL_MIN_CONC = 8192, 1024, 16
# InferenceX sizes max-model-len as isl + osl + this margin.
MODEL_LEN_MARGIN = 256


class Job(BaseModel):
    key: str
    scenario: str
    row: dict
    launch: Launch | None
    secret_env: list[str] = Field(default_factory=list)
    client: list[str]
    dataset: dict
    evals: list[list[str]] = Field(default_factory=list, description="eval argvs (GSM8K) when run-eval")
    assertions: dict = Field(default_factory=dict)
    queue: str
    agents: dict[str, str] = Field(default_factory=dict)
    fingerprint: str

    def label(self) -> str:
        r = self.row
        dpa = " dpa" if r["dp-attn"] else ""
        return f"{self.key} {r['exp-name']} tp{r['tp']} ep{r['ep']}{dpa} conc{r['conc']}"

    def matrix_entry(self) -> dict:
        """The flat JSON row (InferenceX's fields plus key, scenario, fingerprint)."""
        return {
            "config-key": self.key,
            "scenario-type": self.scenario,
            **self.row,
            "fingerprint": self.fingerprint,
        }

    def to_json(self) -> dict:
        return {
            **self.matrix_entry(),
            "image-digest": self.row.get("image-digest"),
            "launch": None if self.launch is None else self.launch.model_dump(),
            "secret-env": self.secret_env,
            "client": self.client,
            "dataset": self.dataset,
            "evals": self.evals,
            "assertions": self.assertions,
            "queue": self.queue,
            "agents": self.agents,
        }


def select_keys(all_keys: list[str], patterns: list[str], strict: bool) -> list[str]:
    """Keys matching any glob, in store order; with strict (test-config) every pattern must match a key."""
    if not patterns:
        return list(all_keys)
    chosen = []
    for pat in patterns:
        hits = [k for k in all_keys if fnmatch.fnmatchcase(k, pat)]
        if not hits and strict:
            raise ServelabError(f"config key {pat!r} matches nothing" + closest(pat, all_keys))
        chosen += [k for k in hits if k not in chosen]
    return [k for k in all_keys if k in chosen]


def _keep_recipe(recipe, f: Filters) -> bool:
    if f.model_prefix and recipe.model_prefix not in f.model_prefix:
        return False
    if f.precision and recipe.precision not in f.precision:
        return False
    if f.framework and recipe.framework not in f.framework:
        return False
    if f.runner and not any(fnmatch.fnmatchcase(recipe.runner, p) for p in f.runner):
        return False
    if f.node_type == "single-node" and recipe.multinode:
        return False
    return not (f.node_type == "multi-node" and not recipe.multinode)


def _keep_arm(arm, f: Filters) -> bool:
    tp = arm.tp_ if not arm.disagg else max(arm.prefill.tp, arm.decode.tp)
    ep = arm.ep_ if not arm.disagg else max(arm.prefill.ep, arm.decode.ep)
    return not ((f.max_tp and tp > f.max_tp) or (f.max_ep and ep > f.max_ep))


def _concs(arm, f: Filters) -> list[int]:
    values = sorted(set(f.conc)) if f.conc else concurrencies(arm, f.step_size)
    return [
        c
        for c in values
        if (f.min_conc is None or c >= f.min_conc) and (f.max_conc is None or c <= f.max_conc)
    ]


def _row(key, recipe, seq, arm, conc) -> dict:
    row = {
        "image": recipe.image,
        "model": recipe.model,
        "model-prefix": recipe.model_prefix,
        "precision": recipe.precision,
        "framework": recipe.framework,
        "runner": recipe.runner,
        "isl": seq.isl,
        "osl": seq.osl,
        "tp": arm.tp_,
        "pp": arm.pp_,
        "dcp-size": arm.dcp_size or 1,
        "pcp-size": arm.pcp_size or 1,
        "conc": conc,
        "max-model-len": seq.isl + seq.osl + MODEL_LEN_MARGIN,
        "ep": arm.ep_,
        "dp-attn": arm.dp_attn_,
        "spec-decoding": arm.spec_,
        "exp-name": f"{recipe.model_prefix}_{seq_len_name(seq.isl, seq.osl)}",
        "disagg": arm.disagg,
        "run-eval": False,
    }
    if arm.disagg:
        for side in ("prefill", "decode"):
            for k, v in getattr(arm, side).dump().items():
                row[f"{side}-{k}"] = v
    if recipe.image_digest:
        row["image-digest"] = recipe.image_digest
    return row


def build_job(store, key: str, scenario: str, seq, arm, conc: int) -> Job:
    recipe = store.recipes[key]
    runner = store.registry.get(recipe.runner)
    row = _row(key, recipe, seq, arm, conc)
    try:
        job = JobPoint(isl=seq.isl, osl=seq.osl, conc=conc)
        launch = None if arm.disagg else render(recipe, arm, row["max-model-len"], job=job)
    except ServelabError as e:
        raise ServelabError(f"{key}: {scenario} {row['exp-name']} tp{arm.tp_} ep{arm.ep_}: {e}") from None
    port = recipe.client.port
    dataset = dataset_spec(recipe, seq, conc)
    client = client_argv(recipe, dataset, conc, port, result_filename(key, row["exp-name"], arm, conc))
    fp = job_fingerprint(
        launch=launch,
        image=recipe.image,
        image_digest=recipe.image_digest,
        client_argv=client,
        dataset=dataset,
        secret_env=recipe.secret_env,
        row=row,
    )
    agents = {"queue": runner.queue, **runner.agents}
    return Job(
        key=key,
        scenario=scenario,
        row=row,
        launch=launch,
        secret_env=recipe.secret_env,
        client=client,
        dataset=dataset,
        assertions={k: v.dump() for k, v in recipe.assertions.items()},
        queue=runner.queue,
        agents=agents,
        fingerprint=fp,
    )


def expand(store, patterns: list[str] | None = None, filters: Filters | None = None) -> list[Job]:
    f = filters or Filters()
    if f.mode == "test-config" and not patterns:
        raise ServelabError("test-config mode needs config keys (globs allowed)")
    if f.conc and f.mode != "test-config":
        raise ServelabError(
            "explicit concurrencies are for test-config mode; full sweeps use each recipe's ladder"
        )
    points: list[tuple] = []
    per_key: dict[str, int] = {}
    for key in select_keys(list(store.recipes), patterns or [], strict=f.mode == "test-config"):
        recipe = store.recipes[key]
        if not _keep_recipe(recipe, f):
            continue
        for scenario, seq, _, arm in recipe.arms():
            if f.scenario_type and scenario not in f.scenario_type:
                continue
            if scenario == "agentic-coding":
                raise ServelabError(
                    f"{key}: agentic-coding scenarios are not expanded into jobs yet; "
                    "leave them out with --scenario-type fixed-seq-len"
                )
            if f.seq_lens and seq_len_name(seq.isl, seq.osl) not in f.seq_lens:
                continue
            if not _keep_arm(arm, f):
                continue
            concs = _concs(arm, f)
            if f.lowest_conc and concs:
                concs = concs[:1]
            per_key[key] = per_key.get(key, 0) + len(concs)
            if len(points) <= f.max_jobs:  # past the limit only the count is kept, for the error
                points += [(key, scenario, seq, arm, c) for c in concs]
    total = sum(per_key.values())
    if total > f.max_jobs:
        biggest = max(per_key, key=lambda k: per_key[k])
        raise ServelabError(
            f"{biggest}: the sweep expands to {total} jobs ({per_key[biggest]} from this recipe), "
            f"above the limit of {f.max_jobs}; narrow it with filters or raise --max-jobs"
        )
    jobs = [build_job(store, *p) for p in points]
    mark_evals(store, jobs, all_evals=f.all_evals, no_evals=f.no_evals)
    if f.evals_only:
        jobs = [j for j in jobs if j.row["run-eval"]]
    return jobs


def mark_evals(store, jobs: list[Job], all_evals: bool = False, no_evals: bool = False) -> None:
    """InferenceX's policy: in each (model, runner, framework, precision, spec, dp-attn) group of qualifying
    rows (8k/1k, conc >= 16), the highest and the median concurrency also run GSM8K. Ties at one concurrency
    go to the first row in sweep order. `all_evals` marks every row (a changelog `all-evals` entry)."""
    if no_evals:
        return
    if all_evals:
        chosen = list(jobs)
    else:
        groups: dict[tuple, list[Job]] = {}
        for j in jobs:
            r = j.row
            if (
                r["isl"] == EVAL_ISL
                and r["osl"] == EVAL_OSL
                and r["conc"] >= EVAL_MIN_CONC
                and not r["disagg"]
            ):
                g = (
                    r["model"],
                    r["runner"],
                    r["framework"],
                    r["precision"],
                    r["spec-decoding"],
                    r["dp-attn"],
                )
                groups.setdefault(g, []).append(j)
        chosen = []
        for members in groups.values():
            concs = sorted({j.row["conc"] for j in members})
            for target in {concs[-1], concs[len(concs) // 2]}:
                chosen.append(next(j for j in members if j.row["conc"] == target))
    for j in chosen:
        recipe = store.recipes[j.key]
        # Recipes without an lm-eval entry (plain InferenceX imports) get InferenceX's GSM8K, 5-shot.
        lm = [e for e in recipe.evals if e.kind == "lm-eval"] or [LmEval(task="gsm8k", num_fewshot=5)]
        j.row["run-eval"] = True
        j.evals = [lm_eval_argv(recipe, e, recipe.client.port) for e in lm]
