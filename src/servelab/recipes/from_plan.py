"""A plan's picks as files a deployment takes: for each chosen aggregated candidate, a servelab recipe (which
`servelab recipes validate` accepts), the launch command the recipe's engine adapter renders (a shell script,
every value quoted) and a Kubernetes Deployment + Service running the same argv.

When the recipe store holds a recipe of the same checkpoint, engine and system, the saved recipe starts from
it (image, pins, environment, engine flags such as tokenizer mode and parsers, evals) and takes the plan's
parallel split, concurrency and engine limits.

Disaggregated picks are not written: the engine adapters do not render prefill/decode launches yet.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from servelab.engines.names import Engine, engine_of
from servelab.errors import ServelabError
from servelab.predict.plan.candidates import Candidate, Plan
from servelab.recipes.engines import ENGINES, Launch, engine_name, render
from servelab.recipes.k8s import dns_name
from servelab.recipes.recipe_store import RecipeStore
from servelab.recipes.schema import Recipe
from servelab.recipes.sweep import MODEL_LEN_MARGIN
from servelab.recipes.yamlio import dump_yaml

# The images the shipped recipes run; a saved recipe names one so it is complete (validation warns that a tag
# without a digest can move).
IMAGES = {
    Engine.VLLM: "vllm/vllm-openai:v0.25.0",
    Engine.SGLANG: "lmsysorg/sglang:latest",
    Engine.TRTLLM: "nvcr.io/nvidia/tensorrt-llm/release:latest",
}
PRECISION = {"bf16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "mxfp4": "fp4", "nvfp4": "fp4"}
FILES_DIR = "/servelab"  # where the Kubernetes pod mounts the launch's files, and runs from


@dataclass(frozen=True)
class Saved:
    rank: int
    directory: Path | None  # None: skipped
    note: str = ""


def picks(plan: Plan, count: int) -> list[int]:
    """The ranks of the best `count` distinct deployments (a parallel split and its replicas): lower ranks of
    the same deployment differ only in the load the client offers."""
    seen: dict[tuple[str, int], int] = {}
    for c in sorted(plan.candidates, key=lambda c: c.rank):
        seen.setdefault((c.parallel["label"], c.replicas), c.rank)
    return sorted(seen.values())[:count]


def save_picks(plan: Plan, directory: Path, ranks: list[int], store: RecipeStore) -> list[Saved]:
    """Write recipe.yaml, launch.sh and k8s.yaml for each candidate of `ranks` under `directory`."""
    if plan.backend not in ENGINES:
        raise ServelabError(
            f"the {plan.backend} backend has no launch command; plan with one of {', '.join(ENGINES)}"
        )
    by_rank = {c.rank: c for c in plan.candidates}
    out = []
    for rank in ranks:
        cand = by_rank[rank]
        if cand.mode != "agg":
            out.append(Saved(rank, None, "disaggregated: prefill/decode launches are not rendered yet"))
            continue
        key = recipe_key(plan, cand)
        runner = _runner(plan, cand, store)
        recipe = to_recipe(plan, cand, runner, _base(plan, store))
        _, seq, _, arm = next(recipe.arms())
        try:
            launch = render(recipe, arm, seq.isl + seq.osl + MODEL_LEN_MARGIN)
        except ServelabError as e:
            out.append(Saved(rank, None, f"{plan.backend} cannot launch {cand.parallel['label']}: {e}"))
            continue
        pick = directory / f"rank{rank}-{key}"
        pick.mkdir(parents=True, exist_ok=True)
        (pick / "recipe.yaml").write_text(dump_yaml({key: recipe.dump()}), encoding="utf-8")
        for rel, content in launch.files.items():
            (pick / rel).write_text(content, encoding="utf-8")
        script = pick / "launch.sh"
        script.write_text(launch_script(launch), encoding="utf-8")
        script.chmod(0o755)
        manifest = kubernetes_manifest(key, recipe.image, launch, cand)
        (pick / "k8s.yaml").write_text(yaml.safe_dump_all(manifest, sort_keys=False), encoding="utf-8")
        out.append(Saved(rank, pick))
    return out


def recipe_key(plan: Plan, cand: Candidate) -> str:
    return dns_name(f"{plan.model}-{cand.parallel['label']}-{plan.system}-{plan.backend}")


def _runner(plan: Plan, cand: Candidate, store: RecipeStore) -> str:
    gpus = cand.parallel["tp"] * cand.parallel["pp"]
    for label, runner in store.runner_labels.runners.items():
        node = runner.node
        if node is not None and node.system == plan.system and node.gpus_per_node >= gpus:
            return label
    raise ServelabError(
        f"no runner in {store.runner_labels.source} has {gpus} GPUs of {plan.system}; "
        "add one to save a recipe"
    )


def _base(plan: Plan, store: RecipeStore) -> tuple[str, Recipe] | None:
    """The store's first recipe of the plan's checkpoint on the same engine and system."""
    for key, r in store.recipes.items():
        node = store.runner_labels.get(r.runner).node
        if (
            r.model == checkpoint(plan)
            and engine_name(r.framework) == plan.backend
            and node is not None
            and node.system == plan.system
        ):
            return key, r
    return None


def checkpoint(plan: Plan) -> str:
    """What the engine loads: the checkpoint id (or path) the plan was asked for, else the spec's source."""
    req = plan.request
    return req.model if "/" in req.model else plan.context.model.source


def to_recipe(plan: Plan, cand: Candidate, runner: str, base: tuple[str, Recipe] | None) -> Recipe:
    """One replica of the candidate as a recipe: its parallel split, the engine limits the plan assumed and
    the candidate's concurrency per replica, on top of `base` (a store recipe) when there is one."""
    req, model = plan.request, plan.context.model
    p = cand.parallel
    arm: dict[str, Any] = {"tp": p["tp"], "conc-list": [cand.concurrency_per_replica]}
    if p["ep"] > 1:
        arm["ep"] = p["ep"]
    if p["dp_attn"]:
        arm["dp-attn"] = True
    if p["pp"] > 1:
        arm["pp"] = p["pp"]
    data: dict[str, Any] = base[1].dump() if base else {"image": IMAGES[engine_of(plan.backend)]}
    engine = data.setdefault("engine", {})
    engine["max-num-batched-tokens"] = plan.engine.max_num_batched_tokens
    engine["max-num-seqs"] = plan.engine.max_num_seqs
    if model.precision.kv_cache.value == "fp8":
        engine["kv-cache-dtype"] = "fp8"
    spec: dict[str, Any] = {"model": req.model}  # the spec the plan used, so validation checks the same
    if req.weight_dtype:
        spec["weight-dtype"] = req.weight_dtype
    weights = model.precision.weights.value
    data |= {
        "description": (
            f"servelab plan rank {cand.rank}: {cand.parallel['label']} x{cand.replicas} on {req.gpus}x "
            f"{plan.system}, {req.isl}/{req.osl} tokens, predicted TTFT {cand.ttft_ms:,.0f} ms and TPOT "
            f"{cand.tpot_ms:,.1f} ms at concurrency {cand.concurrency}"
            + (f"; engine settings from recipe {base[0]}" if base else "")
        ),
        "model": checkpoint(plan),
        "model-prefix": data.get("model-prefix", model.name),
        "runner": runner,
        "precision": PRECISION.get(weights, weights),
        "framework": plan.backend,
        "multinode": False,
        "spec": spec,
        "scenarios": {"fixed-seq-len": [{"isl": req.isl, "osl": req.osl, "search-space": [arm]}]},
    }
    return Recipe.model_validate(data)


def launch_script(launch: Launch) -> str:
    lines = ["#!/bin/sh", "# written by servelab plan --save-dir", "set -e"]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in launch.env.items()]
    lines.append("exec " + shlex.join(launch.argv))
    return "\n".join(lines) + "\n"


def kubernetes_manifest(name: str, image: str, launch: Launch, cand: Candidate) -> list[dict[str, Any]]:
    """A Deployment of the candidate's replicas, each with its GPUs, running the launch argv, and a Service
    in front of them."""
    gpus = cand.parallel["tp"] * cand.parallel["pp"]
    container: dict[str, Any] = {
        "name": "server",
        "image": image,
        "command": launch.argv[:1],
        "args": launch.argv[1:],
        "env": [{"name": k, "value": v} for k, v in launch.env.items()],
        "ports": [{"name": "http", "containerPort": launch.port}],
        "resources": {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}},
        "readinessProbe": {
            "httpGet": {"path": launch.health_path, "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 360,  # loading weights and compiling can take up to an hour
        },
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
    }
    volumes: list[dict[str, Any]] = [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
    docs: list[dict[str, Any]] = []
    if launch.files:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{name}-files"[:63], "labels": {"app": name}},
                "data": dict(launch.files),
            }
        )
        container["workingDir"] = FILES_DIR
        container["volumeMounts"].append({"name": "files", "mountPath": FILES_DIR})
        volumes.append({"name": "files", "configMap": {"name": f"{name}-files"[:63]}})
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": cand.replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [container], "volumes": volumes},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "selector": {"app": name},
            "ports": [{"name": "http", "port": launch.port, "targetPort": "http"}],
        },
    }
    return [*docs, deployment, service]
