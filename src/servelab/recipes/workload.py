"""perf-eval workload files (one per model and GPU): read as they are, converted to recipes and back.

`PerfEvalWorkload` types every field upstream's parser (vllm-project/perf-eval, lib/parse_workload.py) reads,
with its defaults, and is what `servelab run` reads. Importing converts it to a recipe as far as the recipe
holds it: `serve_args` are parsed into typed engine fields (flags without a typed field are kept verbatim in
engine.extra-args), random-dataset `vllm_bench` configs become seq-len blocks, and `lm_eval`/`bfcl` become
typed evals; `not_carried` lists the rest. Exporting renders serve_args from the typed fields again.
"""

from __future__ import annotations

import io
import json
import shlex
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    model_validator,
)

from servelab.engines.grammar import json_arg
from servelab.engines.names import Engine, engine_of
from servelab.engines.vllm.grammar import GRAMMAR as VLLM
from servelab.errors import ServelabError
from servelab.recipes.engines.base import base_env
from servelab.recipes.engines.profiles import Extras
from servelab.recipes.engines.vllm import settings as vllm_settings
from servelab.recipes.gpu_profiles import DEFAULT_TAG, GpuProfile, profile_for
from servelab.recipes.ladder import concurrencies
from servelab.recipes.sweep import MODEL_LEN_MARGIN
from servelab.recipes.tokens import EnvName, ImageRef, ModelId, Name, Text, check_text


class _W(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def dump(self) -> dict:
        return self.model_dump(exclude_unset=True, mode="json")


# Upstream exports env values with str(); YAML ints and bools (VLLM_ROCM_USE_AITER: 1) are common.
EnvValue = Annotated[Text, BeforeValidator(lambda v: str(v) if isinstance(v, (bool, int, float)) else v)]
Positive = Annotated[StrictInt, Field(ge=1)]
# a typo's bound, as `servelab run --repetitions` has it: every repetition is a whole benchmark run (and a
# billion of them filled memory before the first ran)
MAX_REPETITIONS = 1000

# BFCL categories and groups upstream's parser accepts (bfcl_eval names).
BfclCategory = Literal[
    "simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
    "irrelevance", "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
    "live_irrelevance", "live_relevance", "multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
    "multi_turn_long_context", "memory_kv", "memory_vector", "memory_rec_sum", "all", "all_scoring",
    "single_turn", "multi_turn", "live", "non_live", "non_python", "python", "memory", "agentic",
]  # fmt: skip

# `vllm bench serve` options the runner sets from the config's own fields; `args` may not override them.
BENCH_RESERVED_ARGS = frozenset(
    "backend base-url host port model dataset-name num-prompts max-concurrency trust-remote-code "
    "random-input-len random-output-len ignore-eos dataset-path speed-bench-output-len "
    "speed-bench-dataset-subset speed-bench-category skip-tokenizer-init save-result result-filename".split()
)


class WlVllm(_W):
    model: ModelId
    image: ImageRef | None = Field(None, description="Server image; an explicit --image (VLLM_IMAGE) wins.")
    env: dict[EnvName, EnvValue] = Field(
        default_factory=dict, description="Merged over the GPU profile's env."
    )
    serve_args: Text = Field("", description="Appended to `vllm serve MODEL`, split at whitespace.")


class WlModelArgs(_W):
    """lm-eval `local-completions` model_args (model and base_url are set by the runner)."""

    num_concurrent: Positive | None = None
    max_length: Positive | None = Field(None, description="Context length lm-eval assumes for truncation.")
    max_gen_toks: Positive | None = None
    tokenized_requests: bool | None = Field(None, description="False sends text, not token ids.")
    tokenizer_backend: Name | None = Field(None, description="None: no client-side tokenizer.")
    timeout: Positive | None = Field(None, description="Seconds per API request.")


class WlTask(_W):
    name: Name
    num_fewshot: int = Field(0, ge=0)
    model_args: WlModelArgs | None = None


class WlLmEval(_W):
    model_args: WlModelArgs | None = Field(None, description="Defaults for every task; a task's own win.")
    tasks: list[WlTask] = Field(min_length=1)

    def args_for(self, task: WlTask) -> dict:
        """The model_args one task runs with: the workload's defaults, then the task's own."""
        return (self.model_args.dump() if self.model_args else {}) | (
            task.model_args.dump() if task.model_args else {}
        )


class WlBfcl(_W):
    test_categories: list[BfclCategory] = Field(min_length=1)
    num_threads: Positive = 8
    temperature: float = Field(0.001, ge=0)
    maximum_step_limit: Positive = Field(10, description="Inference steps per multi-turn turn.")
    max_test_cases: Positive | dict[BfclCategory, Positive] | None = Field(
        None, description="First N cases of every category, or per category; unset runs all."
    )

    def cases_for(self, category: str) -> int | None:
        if isinstance(self.max_test_cases, dict):
            return self.max_test_cases.get(category)  # type: ignore[call-overload]
        return self.max_test_cases


BenchArg = bool | int | float | str | None | list | dict


class WlBenchConfig(_W):
    """One `vllm bench serve` shape; a list of max_concurrency values fans out into one run per value."""

    name: Name = Field(description="The shape; each run is named NAME-conc-VALUE.")
    backend: Name | None = Field(None, description="vllm bench --backend; unset uses --host/--port.")
    dataset: Literal["random", "speed_bench"] = "random"
    input_len: Positive
    output_len: Positive
    num_prompts: Positive | list[Positive]
    max_concurrency: Positive | list[Positive]
    repetitions: Positive = Field(
        1, le=MAX_REPETITIONS, description="Odd; every raw run kept, the median reported."
    )
    args: dict[str, BenchArg] = Field(default_factory=dict, description="Extra vllm bench serve options.")
    speed_bench_dataset_subset: Name | None = Field(
        None, description="speed_bench only; default qualitative."
    )
    speed_bench_category: Name | None = Field(None, description="speed_bench only.")

    @model_validator(mode="after")
    def _check(self) -> WlBenchConfig:
        if self.repetitions % 2 == 0:
            raise ValueError(f"repetitions {self.repetitions}: must be odd (the median of the runs is kept)")
        concs = self.max_concurrency if isinstance(self.max_concurrency, list) else [self.max_concurrency]
        if not concs:
            raise ValueError("max_concurrency: the list is empty")
        if isinstance(self.num_prompts, list):
            if not isinstance(self.max_concurrency, list):
                raise ValueError("num_prompts may be a list only when max_concurrency is one")
            if len(self.num_prompts) != len(concs):
                raise ValueError(
                    f"num_prompts has {len(self.num_prompts)} values but max_concurrency has {len(concs)}"
                )
        check_text(self.args, "args")  # the values reach vllm bench's argv
        seen: set[str] = set()
        for key in self.args:
            flag = key.lstrip("-").replace("_", "-")
            if not flag:
                raise ValueError(f"args: {key!r} is not an option name")
            if flag in BENCH_RESERVED_ARGS:
                raise ValueError(f"args: --{flag} is set from the config's own fields")
            if flag in seen:
                raise ValueError(f"args: --{flag} is given twice")
            seen.add(flag)
        return self

    def runs(self) -> list[tuple[str, int, int]]:
        """(run name, num_prompts, max_concurrency) for every run of this config."""
        concs = self.max_concurrency if isinstance(self.max_concurrency, list) else [self.max_concurrency]
        prompts = self.num_prompts if isinstance(self.num_prompts, list) else [self.num_prompts] * len(concs)
        return [(f"{self.name}-conc-{c}", n, c) for c, n in zip(concs, prompts, strict=True)]

    def extra_argv(self) -> list[str]:
        """`args` as vllm bench serve flags: true alone, false/null left out, lists repeat the flag."""
        out: list[str] = []
        for key, value in self.args.items():
            flag = "--" + key.lstrip("-").replace("_", "-")
            for v in value if isinstance(value, list) else [value]:
                if v is True:
                    out.append(flag)
                elif v is not False and v is not None:
                    out += [
                        flag,
                        json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else str(v),
                    ]
        return out


class WlBenchMetadata(_W):
    """Overrides for the dashboard row; by default derived from gpu, serve_args and the model id."""

    device: Name | None = None
    tp: Positive | None = None
    precision: Name | None = None


class WlBench(_W):
    configs: list[WlBenchConfig] = Field(default_factory=list)
    metadata: WlBenchMetadata | None = None

    @model_validator(mode="after")
    def _unique(self) -> WlBench:
        seen: set[str] = set()
        for c in self.configs:
            for run, _, _ in c.runs():
                if run in seen:
                    raise ValueError(f"configs: run name {run!r} appears twice")
                seen.add(run)
        return self


class PerfEvalWorkload(_W):
    """One perf-eval workload file: a server, its accuracy evals and benchmark configs (not the simulator's
    request stream, which is predict.serving.workload.Workload). Defaults are upstream's."""

    name: Name
    gpu: Name = Field(description="perf-eval GPU profile (queue, image repo, HF cache, base env).")
    num_gpus: Positive = Field(1, description="GPUs the CI job reserves; the server may use fewer.")
    nightly: bool = False
    timeout_in_minutes: Positive = Field(120, description="CI step timeout.")
    bench_only: bool = Field(False, description="Run vllm_bench only, skipping lm_eval and bfcl.")
    vllm: WlVllm
    lm_eval: WlLmEval | None = None
    bfcl: WlBfcl | None = None
    vllm_bench: WlBench | None = None
    assertions: list[Text] = Field(
        default_factory=list,
        description="servelab extension, not upstream: assertions `servelab run` judges, e.g. "
        "'bench.p99_ttft_ms <= 3000' (docs/run.md has the grammar).",
    )

    @model_validator(mode="after")
    def _something_to_run(self) -> PerfEvalWorkload:
        if not (self.lm_eval or self.bfcl or (self.vllm_bench and self.vllm_bench.configs)):
            raise ValueError("a workload needs at least one of lm_eval, vllm_bench or bfcl")
        return self


def is_workload(data: object) -> bool:
    return isinstance(data, dict) and "vllm" in data and "name" in data and "gpu" in data


def parse_workload(data: object, source: str) -> PerfEvalWorkload:
    try:
        return PerfEvalWorkload.model_validate(data)
    except ValidationError as e:
        raise ServelabError.from_validation(e, source) from None


# The recipe's engine fields that serve_args are read into (ServerSettings field -> recipe engine key);
# flags of every other setting stay verbatim in engine.extra-args, in order.
RECIPE_FIELDS = {
    "max_model_len": "max-model-len",
    "kv_cache_dtype": "kv-cache-dtype",
    "block_size": "block-size",
    "moe_backend": "moe-backend",
    "attention_config": "attention-config",
    "compilation_config": "compilation-config",
    "kernel_config": "kernel-config",
    "tokenizer_mode": "tokenizer-mode",
    "tool_call_parser": "tool-call-parser",
    "reasoning_parser": "reasoning-parser",
    "max_num_batched_tokens": "max-num-batched-tokens",
    "max_num_seqs": "max-num-seqs",
    "memory_fraction": "gpu-memory-utilization",
    "prefix_caching": "enable-prefix-caching",
    "speculative_config": "speculative-config",
}
# Switches the recipe holds only when on.
RECIPE_SWITCHES = {"trust_remote_code": "trust-remote-code", "auto_tool_choice": "enable-auto-tool-choice"}
# What else serve_args are read for: the layout and the revision pin.
LAYOUT_FIELDS = ("tp", "dp", "pp", "expert_parallel", "revision")
SCENARIO = "fixed-seq-len"
# Upstream's GPU profiles that pull ROCm images (vllm/vllm-openai-rocm).
ROCM_GPUS = {"MI300X", "MI355X"}


def split_serve_args(serve_args: str, source: str) -> list[str]:
    """serve_args as upstream's runner passes them (`vllm serve MODEL $serve_args`): split at whitespace,
    quotes kept, so inline JSON such as {"mode":0} arrives whole. A word that starts with a quote is
    shell-quoted, the form servelab's export writes for a value holding spaces."""
    tokens = []
    rest = serve_args.strip()
    while rest:
        if rest[0] in "'\"":
            stream = io.StringIO(rest)
            lex = shlex.shlex(stream, posix=True)
            lex.whitespace_split = True
            lex.commenters = ""
            try:
                tokens.append(lex.get_token() or "")
            except ValueError as e:
                raise ServelabError(f"{source}: serve_args: {e}") from None
            rest = rest[stream.tell() :].lstrip()
        else:
            word = rest.split(maxsplit=1)[0]
            tokens.append(word)
            rest = rest[len(word) :].lstrip()
    return tokens


def join_serve_args(args: list[str]) -> str:
    """The serve_args string for argv: words bare, as upstream's word split reads them (inline JSON too); a
    value holding whitespace or starting with a quote is shell-quoted, which only servelab reads back."""
    return " ".join(
        a if a and a[0] not in "'\"" and not any(c.isspace() for c in a) else shlex.quote(a) for a in args
    )


def _parse(serve_args: str, source: str) -> tuple[dict, dict, str | None]:
    """vLLM serve args -> (engine fields, {tp, pp, dp, ep}, revision), read by vLLM's grammar; flags with no
    recipe field are kept verbatim."""
    tokens = split_serve_args(serve_args, source)
    try:
        s = VLLM.parse_args(tokens, fields={*RECIPE_FIELDS, *RECIPE_SWITCHES, *LAYOUT_FIELDS})
    except ServelabError as e:
        raise ServelabError(f"{source}: serve_args {e}") from None
    engine: dict = {
        key: getattr(s, name) for name, key in RECIPE_FIELDS.items() if getattr(s, name) is not None
    }
    engine |= {key: True for name, key in RECIPE_SWITCHES.items() if getattr(s, name)}
    if s.extra_args:
        engine["extra-args"] = s.extra_args
    topo = {"tp": s.tp or 1, "pp": s.pp or 1, "dp": s.dp or 1, "ep": s.expert_parallel}
    return engine, topo, s.revision


def _layout_gap(topo: dict) -> str | None:
    """Why a server layout has no recipe search-space entry, or None."""
    if topo["dp"] > 1 and topo["tp"] != 1:
        return f"data parallel {topo['dp']} x tensor parallel {topo['tp']} has no recipe topology"
    return None


def _arm(topo: dict) -> dict:
    dp_attn = topo["dp"] > 1
    width = topo["dp"] if dp_attn else topo["tp"]
    return {"tp": width, "ep": width if topo["ep"] else 1, "pp": topo["pp"], "dp-attn": dp_attn}


def parse_serve_args(serve_args: str, source: str) -> tuple[dict, dict, str | None]:
    """vLLM serve args -> (engine fields, topology {tp, ep, pp, dp-attn}, revision)."""
    engine, topo, revision = _parse(serve_args, source)
    gap = _layout_gap(topo)
    if gap:
        raise ServelabError(f"{source}: serve_args: {gap}")
    return engine, _arm(topo), revision


def precision_of(model_id: str) -> str:
    """The precision a checkpoint name says, as perf-eval reads it (default bf16)."""
    low = model_id.lower()
    return next((m for m in ("fp4", "fp8", "int4", "int8", "bf16", "fp16") if m in low), "bf16")


def default_image(profile: GpuProfile) -> str:
    """The image when neither --image nor the workload's vllm.image names one: upstream's nightly tag of the
    GPU profile's image repository (vllm/vllm-openai-rocm for the AMD profiles)."""
    return f"{profile.repo}:{DEFAULT_TAG}"


def server_env(w: PerfEvalWorkload, profile: GpuProfile) -> dict[str, str]:
    """The server's env as upstream's runner builds it: the GPU profile's env, the workload's over it, and
    HF_HOME set to the profile's hf_home unless either sets it."""
    env = dict(profile.env or {}) | dict(w.vllm.env)
    if "HF_HOME" not in env and profile.hf_home:
        env["HF_HOME"] = profile.hf_home
    return env


# serve_args words after which upstream's runner passes --trust-remote-code to vllm bench serve as well
_TRUST_WORDS = {"--trust-remote-code"} | {
    f"--trust-remote-code={v}" for v in ("true", "True", "1", "yes", "Yes")
}


def bench_trusts_remote_code(serve_args: str) -> bool:
    """Whether upstream's run.sh sends --trust-remote-code to the benchmark client: the server is started
    with it (bare, or =true/True/1/yes/Yes), read from serve_args split at whitespace as run.sh matches it."""
    return any(word in _TRUST_WORDS for word in serve_args.split())


def _seqs(w: PerfEvalWorkload, space: dict) -> list[dict]:
    """vllm_bench configs of the random dataset as seq-len blocks; a per-concurrency num_prompts list gives a
    block per concurrency, since a block holds one num-prompts."""
    seqs = []
    for cfg in w.vllm_bench.configs if w.vllm_bench else []:
        if cfg.dataset != "random":
            continue
        concs = cfg.max_concurrency if isinstance(cfg.max_concurrency, list) else [cfg.max_concurrency]
        if isinstance(cfg.num_prompts, list):
            groups = [(n, [c]) for n, c in zip(cfg.num_prompts, concs, strict=True)]
        else:
            groups = [(cfg.num_prompts, concs)]
        for n, conc_list in groups:
            seqs.append(
                {
                    "isl": cfg.input_len,
                    "osl": cfg.output_len,
                    "name": cfg.name,
                    "num-prompts": n,
                    "search-space": [{**space, "conc-list": conc_list}],
                }
            )
    return seqs


def _evals(w: PerfEvalWorkload) -> list[dict]:
    evals: list[dict] = []
    if w.lm_eval:
        for t in w.lm_eval.tasks:
            args = w.lm_eval.args_for(t)
            ev = {"kind": "lm-eval", "task": t.name, "num-fewshot": t.num_fewshot}
            ev |= {k.replace("_", "-"): args[k] for k in _LM_CARRIED if args.get(k) is not None}
            rest = {k: v for k, v in args.items() if k not in _LM_CARRIED}
            if rest:
                ev["model-args"] = rest
            evals.append(ev)
    if w.bfcl:
        evals.append(
            {"kind": "bfcl", "categories": w.bfcl.test_categories, "num-threads": w.bfcl.num_threads}
        )
    return evals


_LM_CARRIED = ("num_concurrent", "max_gen_toks")  # the lm-eval model_args a recipe eval holds


def workload_to_recipe(w: PerfEvalWorkload, runner: str, image: str, source: str) -> tuple[str, dict]:
    """(config key, recipe mapping) in servelab's format; what the recipe cannot hold is listed by
    not_carried()."""
    engine, arm, revision = parse_serve_args(w.vllm.serve_args, source)
    env = dict(w.vllm.env)
    if "CUDA_HOME" in env:
        engine["cuda-home"] = env.pop("CUDA_HOME")  # a typed, fingerprinted pin, not loose env
    space = {k: v for k, v in arm.items() if not (k == "dp-attn" and v is False)}
    spec = engine.get("speculative-config")
    if spec and spec.get("method") == "mtp":
        space["spec-decoding"] = "mtp"
    elif spec:  # a method the recipe's spec-decoding cannot name: kept as the flag it was
        engine["extra-args"] = [
            *engine.get("extra-args", []),
            "--speculative-config",
            json_arg(engine.pop("speculative-config")),
        ]
    seqs = _seqs(w, space)
    if not seqs:
        raise ServelabError(f"{source}: no vllm_bench config of the random dataset; a recipe needs one")
    recipe = {
        "image": image,
        "model": w.vllm.model,
        "model-prefix": w.name.split("-")[0],
        "runner": runner,
        "precision": precision_of(w.vllm.model),
        "framework": Engine.VLLM.value,
        "scenarios": {SCENARIO: seqs},
        "engine": engine,
        "env": env,
        "evals": _evals(w),
        "nightly": w.nightly,
        "gpu-profile": w.gpu,
    }
    if revision:
        recipe["revision"] = revision
    return w.name, recipe


def not_carried(w: PerfEvalWorkload, width: int) -> list[str]:
    """Settings of the workload that the recipe cannot hold yet (servelab run reads them from the workload
    model)."""
    out = []
    top = w.dump()
    for field in ("timeout_in_minutes", "bench_only", "assertions"):
        if field in top:
            out.append(f"{field}={top[field]}")
    if w.num_gpus != width:
        out.append(f"num_gpus={w.num_gpus} (the server uses {width})")
    if w.bfcl:
        rest = {k: v for k, v in w.bfcl.dump().items() if k not in ("test_categories", "num_threads")}
        out += [f"bfcl.{k}={v}" for k, v in rest.items()]
    if w.vllm_bench:
        for i, cfg in enumerate(w.vllm_bench.configs):
            where = f"vllm_bench.configs[{i}] ({cfg.name})"
            if cfg.dataset != "random":
                out.append(f"{where}: dataset {cfg.dataset} (a recipe benchmarks the random dataset only)")
                continue
            c = cfg.dump()
            rest = {k: c[k] for k in ("backend", "repetitions", "args") if k in c}
            rest |= {k: v for k, v in c.items() if k.startswith("speed_bench_")}  # unused with random data
            if rest:
                out.append(f"{where}: " + ", ".join(f"{k}={v}" for k, v in rest.items()))
        if w.vllm_bench.metadata:
            out.append(f"vllm_bench.metadata={w.vllm_bench.metadata.dump()}")
    return out


def import_workload(
    w: PerfEvalWorkload, runner_labels, image: str | None, source: str
) -> tuple[dict[str, dict], list[str]]:
    """(recipe mappings by key, notes): the recipe as far as the schema holds the workload, and notes on the
    rest. A workload the schema cannot hold at all (no random-dataset benchmark, a tp x dp server) gives no
    recipe; the workload model keeps it whole."""
    notes = [f"{source}: perf-eval workload {w.name!r} read; serve_args parsed into typed fields"]
    engine, topo, _ = _parse(w.vllm.serve_args, source)
    gaps = [g for g in (_layout_gap(topo),) if g]
    if not _seqs(w, {}):
        gaps.append("no vllm_bench config of the random dataset (a recipe needs a seq-len block)")
    if gaps:
        notes.append("no recipe: " + "; ".join(gaps) + "; the workload file is what servelab run reads")
        return {}, notes
    if w.gpu in runner_labels.file.gpu_profiles:
        runner = runner_labels.label_for_gpu(w.gpu)
    else:
        runner = f"perf-eval:{w.gpu}"
        notes.append(
            f"gpu {w.gpu} has no gpu-profiles entry in the runners registry; runner set to {runner} "
            "(add the GPU's runners and a gpu-profiles entry to run it)"
        )
    chosen = image or w.vllm.image or default_image(profile_for(w.gpu, source)[0])
    if not (image or w.vllm.image):
        notes.append(f"the workload names no image and none was given; using {chosen}")
    key, mapping = workload_to_recipe(w, runner, chosen, source)
    if engine.get("extra-args"):
        notes.append(
            f"flags without a typed field kept in engine.extra-args: {' '.join(engine['extra-args'])}"
        )
    arm = _arm(topo)
    notes += [f"not carried into the recipe: {n}" for n in not_carried(w, arm["tp"] * arm["pp"])]
    return {key: mapping}, notes


def recipe_to_workloads(key: str, recipe, gpu: str = "") -> list[dict]:
    """The perf-eval workload view of a vLLM recipe: one workload per server layout (a workload file holds one
    server), named KEY, or KEY-tpN-epN[-dpa][-ppN] when the recipe has several layouts."""
    if engine_of(recipe.framework) != Engine.VLLM:
        raise ServelabError(
            f"{key}: perf-eval workload files describe vLLM servers; this recipe uses {recipe.framework}"
        )
    layouts: dict[tuple, list] = {}
    for kind, seq, _, arm in recipe.arms():
        if kind != "fixed-seq-len":
            raise ServelabError(
                f"{key}: {kind} scenarios replay traces; a perf-eval workload has fixed lengths"
            )
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
    server = vllm_settings(recipe, arm, first_seq.isl + first_seq.osl + MODEL_LEN_MARGIN, 0, Extras())
    # host and port are set by the runner, and a max-model-len the recipe leaves unset by each job
    unset = {"host": None, "port": None} | ({} if recipe.engine.max_model_len else {"max_model_len": None})
    args = VLLM.split(VLLM.render(server.model_copy(update=unset)).argv)[1][1:]
    out: dict = {
        "name": name,
        "gpu": recipe.gpu_profile or gpu,
        "num_gpus": arm.tp_ * arm.pp_,
        "nightly": bool(recipe.nightly),
        "vllm": {"model": recipe.model, "env": base_env(recipe), "serve_args": join_serve_args(args)},
    }
    lm = [e for e in recipe.evals if e.kind == "lm-eval"]
    if lm:
        out["lm_eval"] = {"tasks": []}
        for e in lm:
            task = {"name": e.task, "num_fewshot": e.num_fewshot}
            margs = {
                k: v for k, v in (("num_concurrent", e.num_concurrent), ("max_gen_toks", e.max_gen_toks)) if v
            } | (e.model_args or {})
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
