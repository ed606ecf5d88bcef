"""Recipe validation against the model and system specs: the runner exists and matches its system, the
checkpoint's precision runs there, heads and experts divide, the deployment fits in memory with room for at
least one full-length sequence, and every arm renders on its engine."""

from __future__ import annotations

from dataclasses import dataclass, field

from servelab.errors import ServelabError
from servelab.predict.memory import check_fits
from servelab.recipes.engines import JobPoint, engine_name, render
from servelab.recipes.sweep import MODEL_LEN_MARGIN
from servelab.specs import Parallel, check_precision, load_model, load_system

# vLLM's default when a recipe leaves gpu-memory-utilization unset.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
# Fused MoE kernels that only exist on Blackwell (SM100+): DeepGEMM's MegaMoE.
BLACKWELL_ONLY_MOE_BACKENDS = {"deep_gemm_mega_moe"}
KV_DTYPES = {"fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "bf16": "bf16", "auto": None}


@dataclass
class Report:
    key: str
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _model_for(recipe):
    e = recipe.engine
    kv = KV_DTYPES.get(e.kv_cache_dtype) if e.kv_cache_dtype else None
    indexer = "fp4" if (e.attention_config or {}).get("use_fp4_indexer_cache") is True else None
    name = recipe.spec.model if recipe.spec else recipe.model
    weight = recipe.spec.weight_dtype if recipe.spec else None
    try:
        model = load_model(name, weight_dtype=weight, kv_dtype=kv)
        if indexer and model.precision.indexer_cache is not None:
            model = load_model(name, weight_dtype=weight, kv_dtype=kv, indexer_dtype=indexer)
        return model
    except ServelabError as err:
        hint = (
            ""
            if recipe.spec
            else "; if the checkpoint is a variant of a known model, add spec: {model: NAME}"
        )
        raise ServelabError(f"model: {err}{hint}") from None


def validate_recipe(key: str, recipe, registry) -> Report:
    rep = Report(key)
    try:
        node = registry.node_kind(recipe.runner)
        system = load_system(node.system)
        engine_name(recipe.framework)
        model = _model_for(recipe)
        check_precision(model, system)
    except ServelabError as err:
        rep.errors.append(str(err))
        return rep
    e = recipe.engine
    if e.moe_backend in BLACKWELL_ONLY_MOE_BACKENDS and system.compute_capability < 100:
        rep.errors.append(
            f"engine.moe-backend {e.moe_backend} is Blackwell-only; runner {recipe.runner} is {system.name}"
        )
    if not recipe.image_digest:
        rep.warnings.append("no image-digest: the image tag can move under the recipe")
    if not recipe.revision:
        rep.warnings.append("no revision: the checkpoint can change under the recipe")
    gmu = e.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    mbt = e.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    for scenario, seq, i, arm in recipe.arms():
        if scenario == "agentic-coding":
            rep.notes.append(
                f"scenarios.{scenario} search-space[{i}]: trace replay; memory and launch checks cover "
                "fixed-seq-len arms only"
            )
            continue
        where = f"scenarios.{scenario} {seq.isl}/{seq.osl} search-space[{i}]"
        if arm.disagg:
            rep.notes.append(
                f"{where}: disaggregated arm; memory and launch checks cover single-node arms only"
            )
            continue
        try:
            parallel = Parallel(tp=arm.tp_, ep=arm.ep_, dp_attn=arm.dp_attn_, pp=arm.pp_).validate(model)
        except ServelabError as err:
            rep.errors.append(f"{where}: {err}")
            continue
        if parallel.gpus > node.gpus_per_node and not recipe.multinode:
            rep.errors.append(
                f"{where}: needs {parallel.gpus} GPUs but {recipe.runner} nodes have {node.gpus_per_node}"
            )
            continue
        max_len = e.max_model_len or seq.isl + seq.osl + MODEL_LEN_MARGIN
        try:
            mem = check_fits(model, system, parallel, max_num_batched_tokens=mbt, gpu_memory_utilization=gmu)
        except ServelabError as err:
            rep.errors.append(f"{where}: {err}")
            continue
        if mem.max_kv_tokens < max_len:
            rep.errors.append(
                f"{where}: one {max_len}-token sequence does not fit the KV cache "
                f"({mem.max_kv_tokens} tokens per rank after {mem.weights_gib:.1f} GiB of weights)"
            )
            continue
        top = max(arm.conc_list or [arm.conc_end])
        seqs = mem.max_sequences(seq.isl + seq.osl, model, parallel)
        if top > seqs:
            rep.warnings.append(
                f"{where}: concurrency {top} exceeds the ~{seqs} sequences of {seq.isl + seq.osl} "
                f"tokens the KV cache holds (memory model estimate); requests will queue"
            )
        rep.notes.append(
            f"{where}: {parallel.label()} fits: {mem.weights_gib:.1f} GiB weights, "
            f"{mem.kv_gib:.1f} GiB KV per GPU, ~{seqs} sequences (memory model estimate)"
        )
        try:
            render(recipe, arm, max_len, job=JobPoint(isl=seq.isl, osl=seq.osl, conc=top))
        except ServelabError as err:
            rep.errors.append(f"{where}: {err}")
    return rep


def validate_store(store) -> list[Report]:
    reports = [validate_recipe(k, r, store.registry) for k, r in store.recipes.items()]
    runner_problems = store.registry.check_against_specs()
    if runner_problems:
        reports.insert(0, Report("runners.yaml", errors=runner_problems))
    return reports
