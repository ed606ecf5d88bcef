"""perf-eval workload files (one per model and GPU): read as they are, converted to recipes and back.

The `serve_args` string is parsed into typed engine fields (flags without a typed field are kept verbatim in
engine.extra-args, so nothing is lost), `vllm_bench` configs become seq-len blocks with a one-value conc-list,
and `lm_eval`/`bfcl` become typed evals. Exporting renders serve_args from the typed fields again.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.errors import ServelabError
from servelab.recipes.engines.base import base_env
from servelab.recipes.engines.vllm import render
from servelab.recipes.ladder import concurrencies
from servelab.recipes.sweep import MODEL_LEN_MARGIN


class _W(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def dump(self) -> dict:
        return self.model_dump(exclude_unset=True, mode="json")


class WlVllm(_W):
    model: str
    env: dict[str, str] = Field(default_factory=dict)
    serve_args: str = ""


class WlModelArgs(_W):
    num_concurrent: int | None = None
    max_gen_toks: int | None = None


class WlTask(_W):
    name: str
    num_fewshot: int = 0
    model_args: WlModelArgs | None = None


class WlLmEval(_W):
    tasks: list[WlTask]


class WlBfcl(_W):
    test_categories: list[str]
    num_threads: int | None = None


class WlBenchConfig(_W):
    name: str
    dataset: Literal["random"]
    input_len: int
    output_len: int
    num_prompts: int
    max_concurrency: int


class WlBench(_W):
    configs: list[WlBenchConfig]


class PerfEvalWorkload(_W):
    """One perf-eval workload file: a server, its accuracy evals and benchmark configs (not the simulator's
    request stream, which is predict.serving.workload.Workload)."""

    name: str
    gpu: str
    num_gpus: int
    nightly: bool = False
    vllm: WlVllm
    lm_eval: WlLmEval | None = None
    bfcl: WlBfcl | None = None
    vllm_bench: WlBench | None = None


def is_workload(data: object) -> bool:
    return isinstance(data, dict) and "vllm" in data and "name" in data and "gpu" in data


def parse_workload(data: object, source: str) -> PerfEvalWorkload:
    try:
        return PerfEvalWorkload.model_validate(data)
    except ValidationError as e:
        raise ServelabError.from_validation(e, source) from None


# flag -> (engine field, type); flags that set topology or pins are handled in parse_serve_args.
_VALUE_FLAGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--max-model-len": ("max-model-len", int),
    "--kv-cache-dtype": ("kv-cache-dtype", str),
    "--block-size": ("block-size", int),
    "--moe-backend": ("moe-backend", str),
    "--tokenizer-mode": ("tokenizer-mode", str),
    "--tool-call-parser": ("tool-call-parser", str),
    "--reasoning-parser": ("reasoning-parser", str),
    "--max-num-batched-tokens": ("max-num-batched-tokens", int),
    "--max-num-seqs": ("max-num-seqs", int),
    "--gpu-memory-utilization": ("gpu-memory-utilization", float),
    "--compilation-config": ("compilation-config", json.loads),
    "--kernel-config": ("kernel-config", json.loads),
    "--speculative-config": ("speculative-config", json.loads),
}
_BOOL_FLAGS = {
    "--enable-prefix-caching": ("enable-prefix-caching", True),
    "--no-enable-prefix-caching": ("enable-prefix-caching", False),
    "--trust-remote-code": ("trust-remote-code", True),
    "--enable-auto-tool-choice": ("enable-auto-tool-choice", True),
}
_TOPOLOGY = {
    "--tensor-parallel-size": "tp",
    "-tp": "tp",
    "--pipeline-parallel-size": "pp",
    "-pp": "pp",
    "--data-parallel-size": "dp",
    "-dp": "dp",
}


def _scalar(text: str):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "true": True, "false": False}.get(text, text)


def parse_serve_args(serve_args: str, source: str) -> tuple[dict, dict, str | None]:
    """vLLM serve args -> (engine fields, topology {tp, ep, pp, dp-attn}, revision)."""
    try:
        tokens = shlex.split(serve_args)
    except ValueError as e:
        raise ServelabError(f"{source}: serve_args: {e}") from None
    engine: dict = {}
    topo = {"tp": 1, "pp": 1, "dp": 1, "ep": False}
    revision = None
    extra: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        flag, eq, inline = tok.partition("=")
        if flag.startswith(("--attention_config.", "--attention-config.")):
            if not eq:
                raise ServelabError(f"{source}: serve_args {tok}: expected --attention_config.KEY=VALUE")
            engine.setdefault("attention-config", {})[flag.split(".", 1)[1]] = _scalar(inline)
            i += 1
            continue

        takes_value = flag in _TOPOLOGY or flag in _VALUE_FLAGS or flag == "--revision"
        if takes_value and not eq and i + 1 >= len(tokens):
            raise ServelabError(f"{source}: serve_args {flag} needs a value")
        value = inline if eq else (tokens[i + 1] if takes_value else "")
        step = 1 if eq else 2
        try:
            if flag in _TOPOLOGY:
                topo[_TOPOLOGY[flag]] = int(value)
            elif flag == "--revision":
                revision = value
            elif flag in _VALUE_FLAGS:
                name, conv = _VALUE_FLAGS[flag]
                engine[name] = conv(value)
            elif flag in _BOOL_FLAGS and not eq:
                name, v = _BOOL_FLAGS[flag]
                engine[name] = v
                step = 1
            elif flag == "--enable-expert-parallel" and not eq:
                topo["ep"] = True
                step = 1
            else:
                extra.append(tok)  # no typed field yet: kept verbatim, still rendered and fingerprinted
                step = 1
        except (ValueError, json.JSONDecodeError) as e:
            raise ServelabError(f"{source}: serve_args {flag}: bad value ({e})") from None
        i += step
    if extra:
        engine["extra-args"] = extra
    if topo["dp"] > 1 and topo["tp"] != 1:
        raise ServelabError(
            f"{source}: serve_args: data parallel with tp {topo['tp']} > 1 has no recipe topology"
        )
    dp_attn = topo["dp"] > 1
    width = topo["dp"] if dp_attn else topo["tp"]
    arm = {"tp": width, "ep": width if topo["ep"] else 1, "pp": topo["pp"], "dp-attn": dp_attn}
    return engine, arm, revision


def _precision(model_id: str) -> str:
    low = model_id.lower()
    return "fp4" if "fp4" in low else "fp8" if "fp8" in low else "bf16"


def workload_to_recipe(w: PerfEvalWorkload, runner: str, image: str, source: str) -> tuple[str, dict]:
    """(config key, recipe mapping) in servelab's format."""
    engine, arm, revision = parse_serve_args(w.vllm.serve_args, source)
    env = dict(w.vllm.env)
    if "CUDA_HOME" in env:
        engine["cuda-home"] = env.pop("CUDA_HOME")  # a typed, fingerprinted pin, not loose env
    if arm["tp"] * arm["pp"] != w.num_gpus:
        raise ServelabError(
            f"{source}: num_gpus {w.num_gpus} disagrees with serve_args ({arm['tp']} x pp {arm['pp']})"
        )
    seqs = []
    for cfg in w.vllm_bench.configs if w.vllm_bench else []:
        space = {k: v for k, v in arm.items() if not (k == "dp-attn" and v is False)}
        seqs.append(
            {
                "isl": cfg.input_len,
                "osl": cfg.output_len,
                "name": cfg.name,
                "num-prompts": cfg.num_prompts,
                "search-space": [{**space, "conc-list": [cfg.max_concurrency]}],
            }
        )
    evals: list[dict] = []
    for t in w.lm_eval.tasks if w.lm_eval else []:
        ev = {"kind": "lm-eval", "task": t.name, "num-fewshot": t.num_fewshot}
        if t.model_args:
            ev |= {k.replace("_", "-"): v for k, v in t.model_args.dump().items()}
        evals.append(ev)
    if w.bfcl:
        ev = {"kind": "bfcl", "categories": w.bfcl.test_categories}
        if w.bfcl.num_threads is not None:
            ev["num-threads"] = w.bfcl.num_threads
        evals.append(ev)
    recipe = {
        "image": image,
        "model": w.vllm.model,
        "model-prefix": w.name.split("-")[0],
        "runner": runner,
        "precision": _precision(w.vllm.model),
        "framework": "vllm",
        "scenarios": {"fixed-seq-len": seqs},
        "engine": engine,
        "env": env,
        "evals": evals,
        "nightly": w.nightly,
        "gpu-profile": w.gpu,
    }
    if revision:
        recipe["revision"] = revision
    return w.name, recipe


def recipe_to_workloads(key: str, recipe, gpu: str = "") -> list[dict]:
    """The perf-eval workload view of a vLLM recipe: one workload per server layout (a workload file holds one
    server), named KEY, or KEY-tpN-epN[-dpa][-ppN] when the recipe has several layouts."""
    if recipe.framework != "vllm":
        raise ServelabError(
            f"{key}: perf-eval workload files describe vLLM servers; this recipe uses {recipe.framework}"
        )
    layouts: dict[tuple, list] = {}
    for _, seq, _, arm in recipe.arms():
        if arm.disagg:
            raise ServelabError(f"{key}: disaggregated arms have no single vLLM server to describe")
        layouts.setdefault((arm.tp_, arm.ep_, arm.pp_, arm.dp_attn_), []).append((seq, arm))
    out = []
    for (tp, ep, pp, dpa), members in layouts.items():
        layout = f"-tp{tp}-ep{ep}" + ("-dpa" if dpa else "") + (f"-pp{pp}" if pp > 1 else "")
        out.append(_workload(key + (layout if len(layouts) > 1 else ""), recipe, members, gpu))
    return out


def recipe_to_workload(key: str, recipe, gpu: str = "") -> dict:
    """The workload of a recipe with one server layout."""
    workloads = recipe_to_workloads(key, recipe, gpu)
    if len(workloads) != 1:
        raise ServelabError(
            f"{key}: a workload file holds one server layout; this recipe has {len(workloads)}"
        )
    return workloads[0]


def _workload(name: str, recipe, arms: list, gpu: str) -> dict:
    first_seq, arm = arms[0]
    argv = render(
        recipe, arm, recipe.engine.max_model_len or first_seq.isl + first_seq.osl + MODEL_LEN_MARGIN, 0
    )
    args = argv.argv[3:]
    for flag in ("--host", "--port"):  # set by the runner, not part of the workload
        j = args.index(flag)
        del args[j : j + 2]
    if not recipe.engine.max_model_len:
        j = args.index("--max-model-len")
        del args[j : j + 2]
    out: dict = {
        "name": name,
        "gpu": recipe.gpu_profile or gpu,
        "num_gpus": arm.tp_ * arm.pp_,
        "nightly": bool(recipe.nightly),
        "vllm": {"model": recipe.model, "env": base_env(recipe), "serve_args": shlex.join(args)},
    }
    lm = [e for e in recipe.evals if e.kind == "lm-eval"]
    if lm:
        out["lm_eval"] = {"tasks": []}
        for e in lm:
            task = {"name": e.task, "num_fewshot": e.num_fewshot}
            margs = {
                k: v for k, v in (("num_concurrent", e.num_concurrent), ("max_gen_toks", e.max_gen_toks)) if v
            }
            if margs:
                task["model_args"] = margs
            out["lm_eval"]["tasks"].append(task)
    for e in recipe.evals:
        if e.kind == "bfcl":
            out["bfcl"] = {"test_categories": e.categories} | (
                {"num_threads": e.num_threads} if e.num_threads else {}
            )
    configs = []
    for seq, a in arms:
        for c in concurrencies(a):
            configs.append(
                {
                    "name": seq.name or f"{seq.isl}-in-{seq.osl}-out-conc-{c}",
                    "dataset": "random",
                    "input_len": seq.isl,
                    "output_len": seq.osl,
                    "num_prompts": seq.num_prompts
                    or recipe.client.num_prompts
                    or c * recipe.client.prompts_per_conc,
                    "max_concurrency": c,
                }
            )
    if configs:
        out["vllm_bench"] = {"configs": configs}
    return out
