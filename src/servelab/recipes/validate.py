"""Recipe validation against the model and system specs: the runner exists and matches its system, the
checkpoint's precision runs there, heads and experts divide, the deployment fits in memory with room for at
least one full-length sequence, and every arm renders on its engine."""

from __future__ import annotations

from dataclasses import dataclass, field

from servelab.engines.command import grammar_of
from servelab.engines.names import Engine
from servelab.engines.releases import check_launch
from servelab.engines.settings import ServerSettings
from servelab.errors import ServelabError
from servelab.predict.memory import check_fits, vllm_gpu_memory_utilization
from servelab.recipes.engines import JobPoint, engine_name, render
from servelab.recipes.ladder import concurrencies
from servelab.recipes.sweep import MODEL_LEN_MARGIN
from servelab.recipes.yamlio import load_yaml
from servelab.specs import ENGINE_KV_CACHE_DTYPES, Parallel, check_precision, load_model, load_system

DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
# Fused MoE kernels that only exist on Blackwell (SM100+): DeepGEMM's MegaMoE.
BLACKWELL_ONLY_MOE_BACKENDS = {"deep_gemm_mega_moe"}
# Ways to run FP4 experts without FP4 tensor cores, the checkpoint's FP4 experts kept as stored in memory:
# vLLM's deepseek_v4_fp8 quantization (InferenceX serves DeepSeek-V4-Pro so on H200, MI300X and MI325X; FP8
# experts would not fit: about 186 GiB a GPU at tp8) and SGLang's Marlin MoE kernel (W4A16, dequantized in
# the GEMM; InferenceX's DeepSeek-V4-Pro on H200 with SGLang).
WEIGHT_ONLY_FP4_QUANTIZATIONS = {"deepseek_v4_fp8"}
WEIGHT_ONLY_FP4_MOE = {"marlin"}


@dataclass
class Report:
    key: str
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _model_for(recipe):
    e = recipe.engine
    kv = ENGINE_KV_CACHE_DTYPES.get(e.kv_cache_dtype) if e.kv_cache_dtype else None
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


def _launch_settings(recipe, engine: Engine, seq, arm) -> ServerSettings | None:
    """The server settings of an arm's lowest-concurrency job, as rendered (typed fields and InferenceX's
    launch profile, TensorRT-LLM's options file included): they say what quantization, MoE kernel and memory
    budget the engine really runs with. None when the arm does not render (reported per arm)."""
    job = JobPoint(isl=seq.isl, osl=seq.osl, conc=concurrencies(arm)[0])
    try:
        launch = render(recipe, arm, seq.isl + seq.osl + MODEL_LEN_MARGIN, job=job)
    except ServelabError:
        return None
    grammar = grammar_of(engine)
    path = grammar.options_path(launch.argv)
    try:
        options = (
            load_yaml(launch.files[path], path) or {} if path is not None and path in launch.files else None
        )
        return grammar.parse(launch.argv, options)
    except ServelabError:
        return None  # a launch its engine cannot read keeps the defaults; rendering it is checked per arm


def _weight_only_fp4(recipe, engine: Engine) -> str | None:
    """The quantization or MoE kernel of the recipe's first single-node arm that runs FP4 experts without
    FP4 tensor cores, if any."""
    for scenario, seq, _, arm in recipe.arms():
        if scenario == "fixed-seq-len" and not arm.disagg:
            launched = _launch_settings(recipe, engine, seq, arm)
            if launched is None:
                return None
            if launched.quantization in WEIGHT_ONLY_FP4_QUANTIZATIONS:
                return f"quantization {launched.quantization}"
            kernel = launched.moe_backend
            return f"MoE kernel {kernel}" if kernel in WEIGHT_ONLY_FP4_MOE else None
    return None


def _kv_rule(engine, launched: ServerSettings | None, e, image: str) -> dict:
    """The engine's own KV-cache rule and memory share, as predict.memory.memory_per_gpu takes them: SGLang's
    --mem-fraction-static holds weights and the KV pool; TensorRT-LLM gives the KV cache a share of what
    weights and activations leave; vLLM and ATOM fill a share of the whole GPU (ATOM's model_runner.py: util x
    total). A share the launch leaves unset is the engine's default (vLLM's by the image's release); which
    share is which: ServerSettings.memory_fraction."""
    share = (launched.memory_fraction if launched else None) or e.gpu_memory_utilization
    if share is None and engine == Engine.VLLM:  # an image that is not vLLM's names no vLLM release
        share = vllm_gpu_memory_utilization(image if "vllm" in image.lower() else None)
    return {
        "gpu_memory_utilization": share,
        "static_fraction": engine == Engine.SGLANG,
        "fraction_of_free": engine == Engine.TRTLLM,
    }


def _batched_tokens(launched: ServerSettings | None, e) -> int:
    """The step's token budget the engine runs with (vLLM max-num-batched-tokens, SGLang chunked-prefill-size,
    TensorRT-LLM max_num_tokens); the recipe's or the default where the launch keeps the engine's."""
    value = launched.max_num_batched_tokens if launched else None
    return value or e.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS


def validate_recipe(key: str, recipe, runner_labels, tolerant: bool = False) -> Report:
    """What is wrong with one recipe. `tolerant` (an InferenceX checkout): what servelab cannot judge (a
    framework without a launch adapter, a model without a config) is a warning, not the recipe's error."""
    rep = Report(key)
    try:
        node = runner_labels.node_kind(recipe.runner)
        system = load_system(node.system)
    except ServelabError as err:
        rep.errors.append(str(err))
        return rep
    try:
        engine = engine_name(recipe.framework)
        model = _model_for(recipe)
    except ServelabError as err:
        if not tolerant:
            rep.errors.append(str(err))
        else:
            rep.warnings.append(f"not checked: {err}")
        return rep
    try:
        weight_only = None if system.supports_fp4 else _weight_only_fp4(recipe, engine)
        if weight_only:
            rep.notes.append(
                f"{weight_only} runs the FP4 experts without FP4 tensor cores (kept FP4 in memory)"
            )
        else:
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
        launched = _launch_settings(recipe, engine, seq, arm)
        mbt = _batched_tokens(launched, e)
        rule = _kv_rule(engine, launched, e, recipe.image)
        try:
            mem = check_fits(model, system, parallel, max_num_batched_tokens=mbt, **rule)
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
            launch = render(recipe, arm, max_len, job=JobPoint(isl=seq.isl, osl=seq.osl, conc=top))
        except ServelabError as err:
            rep.errors.append(f"{where}: {err}")
            continue
        _check_flags(rep, where, engine, recipe.image, launch)
    return rep


def _check_flags(rep: Report, where: str, engine: Engine, image: str, launch) -> None:
    """The arm's launch against the flags its image's engine release accepts."""
    files = {k: load_yaml(v, k) for k, v in launch.files.items() if k.endswith((".yml", ".yaml"))}
    check = check_launch(engine, image, launch.argv, files)
    rep.errors += [f"{where}: {e}" for e in check.errors]
    rep.warnings += [f"{where}: {w}" for w in check.warnings]
    if check.note and check.note not in rep.notes:
        rep.notes.append(check.note)


def validate_store(store, keys: list[str] | None = None) -> list[Report]:
    """Every recipe of the store (or of `keys`); an InferenceX checkout tolerantly (see validate_recipe)."""
    tolerant = store.notes is not None
    chosen = store.recipes if keys is None else {k: store.recipes[k] for k in keys}
    reports = [validate_recipe(k, r, store.runner_labels, tolerant) for k, r in chosen.items()]
    runner_problems = store.runner_labels.check_against_specs()
    if runner_problems:
        reports.insert(0, Report("runners.yaml", errors=runner_problems))
    return reports
