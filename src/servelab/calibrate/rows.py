"""Measured rows mapped onto servelab's specs, one Case per usable row: the Case every source makes
(AIConfigurator's silicon_sample.csv here; InferenceX result files and the results store in their own
modules), and the reading of silicon_sample.csv."""

import csv
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from servelab.calibrate.clients import copied_from_inferencex, generated_deployment
from servelab.calibrate.inferencex_runs import measured_of, parse_measured, tie_rows
from servelab.calibrate.recipes import Load, RunSettings, run_settings
from servelab.engines import MODELLED, Engine, engine_kv_dtype
from servelab.errors import ServelabError
from servelab.specs import Dtype, ModelSpec, Parallel, load_model, load_system
from servelab.specs.families import family_of
from servelab.specs.registry import released_as
from servelab.userfiles import check_regular

ENGINES = MODELLED  # the engines the performance model prices
# checkpoints in the file that servelab embeds under another id (same architecture, FP8 weights)
ALIASES = {"nvidia/llama-3.1-8b-instruct-fp8": ("meta-llama/Llama-3.1-8B-Instruct", "fp8")}
GPUS_PER_NODE = 8
# a model the file names by its publisher (AIConfigurator's silicon rows say zhipuai/GLM-5; the hub has no
# such repository) -> the checkpoint each GEMM precision ran: InferenceX's GLM-5 jobs of the rows' dates serve
# zai-org/GLM-5-FP8 on H200 and B200 and nvidia/GLM-5-NVFP4 on B200 (SemiAnalysisAI/InferenceX 843c6254f
# history, .github/configs/nvidia-master.yaml glm5-fp8-h200-sglang at ebb48d4bc, glm5-fp8-b200-sglang at
# 13930ca61, glm5-nvfp4-b200-sglang at d43805fc3)
RELEASES_BY_PRECISION = {
    "zhipuai/glm-5": {
        "bf16": "zai-org/GLM-5",
        "fp8": "zai-org/GLM-5-FP8",
        "fp8_block": "zai-org/GLM-5-FP8",
        "nvfp4": "nvidia/GLM-5-NVFP4",
    },
    # InferenceX's Qwen3.5 jobs serve Qwen/Qwen3.5-397B-A17B-FP8 (fp8) and, until 2026-08-10 (f4eaa3981, after
    # every pinned row), nvidia/Qwen3.5-397B-A17B-NVFP4 (fp4); the deprecated bf16 ones Qwen/Qwen3.5-397B-A17B
    # (SemiAnalysisAI/InferenceX 843c6254f, configs/nvidia-master.yaml qwen3.5-*-sglang,
    # configs/deprecated/nvidia-qwen3.5-bf16-master.yaml)
    "qwen/qwen3.5-397b-a17b": {
        "bf16": "Qwen/Qwen3.5-397B-A17B",
        "fp8": "Qwen/Qwen3.5-397B-A17B-FP8",
        "fp8_block": "Qwen/Qwen3.5-397B-A17B-FP8",
        "nvfp4": "nvidia/Qwen3.5-397B-A17B-NVFP4",
    },
}
# the NVFP4 checkpoint an NVFP4 row of a model ran, where the release keeps modules out of NVFP4: InferenceX's
# NVIDIA DeepSeek FP4 jobs serve nvidia/DeepSeek-R1-0528-FP4-V2 or -NVFP4-v2 (SemiAnalysisAI/InferenceX
# 843c6254f, configs/nvidia-master.yaml), and the rows named DeepSeek-V3 are those runs (docs/accuracy.md,
# "TensorRT-LLM's DeepSeek points on B200")
# InferenceX's Kimi-K2.5 FP4 jobs serve nvidia/Kimi-K2.5-NVFP4 (.github/configs/nvidia-master.yaml at
# 6c3acebfa, kimik2.5-fp4-b200-vllm; its INT4 jobs serve Moonshot's moonshotai/Kimi-K2.5)
NVFP4_RELEASES = {
    "deepseek-r1": "nvidia/DeepSeek-R1-0528-FP4",
    "deepseek-v3": "nvidia/DeepSeek-R1-0528-FP4",
    "kimi-k2.5": "nvidia/Kimi-K2.5-NVFP4",
}


@dataclass
class Case:
    """One measured point, mapped onto servelab's specs."""

    row_id: str
    family: str  # the model family (specs.families): the unit left out in cross-validation
    engine: Engine
    version: str
    model: ModelSpec
    parallel: Parallel
    concurrency: int
    isl: int
    osl: int
    ttft_ms: float
    tpot_ms: float
    note: str = ""
    source: str = "silicon_sample.csv"  # which input the row came from
    system: str = ""  # the servelab system it was measured on
    measured: str = ""  # the date it was measured (YYYY-MM-DD), where the source says
    settings: RunSettings | None = None  # the engine settings its recipe set (None: the engine's defaults)
    run: str = ""  # the InferenceX run it is tied to: `identified|agreed|ambiguous COMMITS` or `none`
    # silicon_sample.csv's silicon_data_source: who measured the row, and so how its client sent it
    # (calibrate.clients), where no recipe says
    silicon_source: str = ""

    def __post_init__(self) -> None:
        # every source makes its rows here: a NaN, an infinity or a time <= 0 would reach a fit (and a
        # calibration file) as a measurement; each source counts the row skipped with this reason
        for name, value in (("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"measured {name} (ms) is not a positive finite number")

    @property
    def model_name(self) -> str:
        return self.model.name

    def measurement(self) -> tuple:
        """What makes two rows the same measurement written twice: the deployment by architecture (a database
        dump names InferenceX's DeepSeek-R1 runs DeepSeek-V3, which has R1's architecture), the load and the
        measured values to two decimals (sources round differently: a gap-analysis file keeps two)."""
        return (
            self.engine,
            self.model.model_dump_json(exclude={"name", "source"}),
            self.parallel,
            self.isl,
            self.osl,
            self.concurrency,
            round(self.ttft_ms, 2),
            round(self.tpot_ms, 2),
        )


def read_rows(path: Path) -> list[dict]:
    check_regular(path, "csv")  # a FIFO would be waited on forever
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _num(row: dict, key: str, default: float | None = None) -> float | None:
    text = (row.get(key) or "").strip()
    if not text or text.lower() == "nan":
        return default
    return float(text)


def _int(row: dict, key: str, default: float | None = None) -> int:
    value = _num(row, key, default)
    if value is None:
        raise ValueError(f"no {key}")
    return int(value)


def concurrency_of(row: dict) -> int:
    m = re.search(r"silicon_concurrency=(\d+)", row.get("silicon_data_source", ""))
    return int(m.group(1)) if m else _int(row, "batch_size", 1)


def measured_date(row: dict) -> str:
    """The UTC date a row was measured, from its source note (`measured=2026-01-14T...`), or ""."""
    return parse_measured(measured_of(row))[1]


def with_recipe(case: Case, precision: str | None = None) -> Case:
    """The case with the settings its recipe set on its measured date, where a recipe covers it
    (`precision`: the row's precision column, which picks the script where a system has one per
    precision)."""
    if not case.measured:
        return case
    load = Load(case.parallel.tp, case.parallel.dp_attn, case.concurrency, case.isl, case.osl)
    case.settings = run_settings(case.engine, case.model.name, case.system, case.measured, load, precision)
    if case.settings and case.settings.expert_parallel and case.model.is_moe and case.parallel.ep == 1:
        # vLLM's --enable-expert-parallel spreads the experts over every GPU of the engine (EP size = TP x
        # DP, vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make), not the row's ep 1
        case.parallel = case.parallel.model_copy(update={"ep": case.parallel.tp})
        case.note = "; ".join(
            n for n in (case.note, f"expert parallel over {case.parallel.tp} GPUs: the recipe's launch") if n
        )
    return case


def parallel_of(row: dict, is_moe: bool = True) -> tuple[Parallel, str]:
    """servelab's Parallel for a row, and a note when the row's fields had to be read another way.

    AIConfigurator writes tp x attention_dp GPUs for attention and moe_tp x moe_ep for MoE layers; both must
    count the same GPUs. Some rows write tp_size = tp x ep (64 = 8 x 8 on one 8-GPU node; 16 = 4 x 4 where the
    row id says tp4_ep4): those read as tp = moe_tp, ep = moe_ep. Rows written tp T, attention_dp T, moe_tp 1,
    moe_ep T x T are InferenceX's single-node vLLM runs of `{tp: T, ep: T}` (MiniMax-M2.5's and Kimi-K2.5's,
    no other row): their scripts launch on T GPUs (`--tensor-parallel-size $TP --enable-expert-parallel`, or
    for a dp-attn run of the NVFP4 scripts `--tensor-parallel-size=1 --data-parallel-size=$TP`), and the same
    H100 runs, measured alike, are written tp 4, moe_ep 4 in one export (2026-03-25.csv) and tp 4,
    attention_dp 4, moe_ep 16 in the next (2026-04-06.csv); they read as tp = ep = T (the export drops the
    dp-attn flag, so attention is read as tensor-parallel). Rows whose counts disagree otherwise are refused
    (for example tp 1 with moe_tp 2 for a 235B model that cannot fit one GPU). Dense models have no MoE split:
    their moe fields are ignored."""
    tp = _int(row, "tp_size", 1)
    dp = _int(row, "attention_dp_size", 1)
    moe_tp = _int(row, "moe_tp_size", tp * dp)
    moe_ep = _int(row, "moe_ep_size", 1)
    pp = _int(row, "pp_size", 1)
    note = ""
    if not is_moe:
        return Parallel(tp=tp * dp, pp=pp), note
    attn_gpus, moe_gpus = tp * dp, moe_tp * moe_ep
    if tp > 1 and dp == tp and moe_tp == 1 and moe_ep == tp * dp:
        note = f"tp_size {tp}, attention_dp_size {dp}, moe_ep_size {moe_ep} read as tp {tp} x ep {tp}"
        return Parallel(tp=tp, ep=tp, pp=pp), note
    if attn_gpus > GPUS_PER_NODE and moe_tp == moe_ep and attn_gpus == moe_gpus:
        note = f"tp_size {attn_gpus} read as tp {moe_tp} x ep {moe_ep}"
        return Parallel(tp=moe_tp, ep=moe_ep, dp_attn=dp > 1, pp=pp), note
    if attn_gpus != moe_gpus:
        raise ValueError(f"attention on {attn_gpus} GPUs but MoE on {moe_gpus}")
    return Parallel(tp=attn_gpus, ep=moe_ep, dp_attn=dp > 1, pp=pp), note


def model_of(row: dict, configs: Mapping[str, Path] | None = None) -> ModelSpec:
    """The ModelSpec of a row at the precision it was measured with, or raise ValueError (not embedded).
    `configs`: config.json files of checkpoints servelab does not embed, by lower-case checkpoint id."""
    path = row["model_path"].strip()
    checkpoint, weights = ALIASES.get(path.lower(), (path, None))
    gemm = (row.get("gemm_quant_mode") or "").strip()
    checkpoint = RELEASES_BY_PRECISION.get(path.lower(), {}).get(gemm, checkpoint)
    if configs and path.lower() in configs:
        checkpoint = str(configs[path.lower()])
    try:
        model = load_model(checkpoint, hub=False)
    except ServelabError:
        raise ValueError(f"model {path} is not embedded") from None
    gemm = weights or gemm
    # the row's GEMM precision overrides a BF16 checkpoint (measured with FP8 quantization); a checkpoint that
    # is already 8-bit or 4-bit keeps its own format (fp8 in the row means 'FP8 of some kind')
    if gemm in ("fp8", "fp8_block") and model.precision.weights in (Dtype.bf16, Dtype.fp16):
        model = load_model(checkpoint, weight_dtype=gemm, hub=False)
    elif gemm == "nvfp4" and not model.precision.experts.is_fp4:
        # an NVFP4 run of an 8- or 16-bit checkpoint (NVIDIA's FP4 releases of it, on Blackwell): the row
        # names the GEMMs' and the experts' formats; a checkpoint with FP4 experts of its own (gpt-oss's
        # MXFP4) keeps them
        # NVIDIA's NVFP4 releases declare an FP8 KV cache (their hf_quant_config.json kv_cache_quant_algo, as
        # AIConfigurator bundles them: 20 of its 23 at 095f58a5; the three without one, DeepSeek-V4 Flash and
        # Pro and MiniMax-M3, have no pinned row), which every engine takes as its `auto`
        # (specs.ENGINE_KV_CACHE_DTYPES)
        moe = (row.get("moe_quant_mode") or "").strip()
        model = load_model(
            checkpoint,
            weight_dtype="nvfp4",
            expert_dtype="nvfp4" if moe == "nvfp4" else None,
            kv_dtype="fp8",
            hub=False,
        )
        if model.name in NVFP4_RELEASES:  # and the modules that release keeps unquantized
            model = released_as(model, NVFP4_RELEASES[model.name])
    elif gemm == "int4_wo" and model.precision.experts != Dtype.int4:
        raise ValueError(f"GEMM precision int4_wo, but {path} has no INT4 weight-only experts")
    elif gemm and gemm not in ("fp8", "fp8_block", "bf16", "nvfp4", "mxfp4", "int4_wo"):
        raise ValueError(f"GEMM precision {gemm} has no servelab dtype")
    return model


# ModelOpt FP8 checkpoints whose hf_quant_config.json declares kv_cache_quant_algo FP8 (AIConfigurator
# bundles the 70B's, aic-core model_configs/nvidia--Llama-3.1-70B-Instruct-FP8_hf_quant_config.json; the 8B
# is the same ModelOpt release)
FP8_KV_CHECKPOINTS = frozenset({"nvidia/llama-3.1-8b-instruct-fp8", "nvidia/llama-3.1-70b-instruct-fp8"})


def fp8_kv_if_unmarked(engine: str, row: dict, model: ModelSpec) -> ModelSpec:
    """The file does not say which KV-cache dtype a row ran. TensorRT-LLM's FP8 rows are read as FP8-KV runs:
    TensorRT-LLM takes the KV quantization an FP8 checkpoint declares (ModelOpt's kv_cache_quant_algo),
    InferenceX's DeepSeek-R1 H200 recipe sets kv_cache_config dtype fp8, AIConfigurator reads FP8 rows the
    same way, and the rows' own no-evict waits fit only an FP8 cache (Llama-3.1-70B tp1, 1024/8192,
    concurrency 128: 369 s measured, 469 s predicted with FP8 KV, 1,156 s with BF16). On vLLM and SGLang a
    checkpoint that declares an FP8 KV cache (FP8_KV_CHECKPOINTS) runs one too: AIConfigurator's generator
    infers the KV mode from kv_cache_quant_algo and passes `--kv-cache-dtype fp8`, and its vLLM 0.12 rows of
    nvidia/Llama-3.1-8B-Instruct-FP8 decode at the FP8 cache's speed (one GPU, 128 clients of 4,000 + 1,000
    tokens: TPOT 22.0 ms measured, 21.9 predicted with FP8 KV, 30.6 with BF16). Other checkpoints keep
    those engines' BF16 default (`--kv-cache-dtype auto`), except an FP8 row of a deployment
    AIConfigurator's generator wrote (generated_deployment): there the KV-cache dtype is AIConfigurator's
    pick, FP8 wherever its GEMMs are (ai-dynamo/aiconfigurator 5e0243eb1, the generator of these Dynamo 0.8.0
    runs: sdk/task.py `_get_quant_mode` picks kvcache "fp8" beside the FP8 GEMMs on SM 89 and later, vLLM's
    GEMMs and experts as "fp8", the rows' gemm_quant_mode and moe_quant_mode; its vLLM collector times
    FP8-KV attention there, collector/vllm/collect_attn.py, so the pick stands; generator/module_bridge.py
    passes it as kv_cache_dtype, which config/backend_config_mapping.yaml renders as vLLM's and SGLang's
    `--kv-cache-dtype`). vLLM 0.12.0's Qwen3-32B FP8 row at tp1, 24 clients of 4,000 + 1,000 tokens, decodes
    in 16.9 ms a token, under what its BF16 cache alone would take to read (24 x about 4,500 tokens x 256 KiB
    = 28 GB a step, 8-9 ms at the H100's 3.35 TB/s) plus its 33 GB of FP8 weights (about 10 ms). An engine's
    own pick where the launch names none is FP8 too (servelab.engines.engine_kv_dtype: SGLang's for a DSA
    model on Blackwell)."""
    fp8 = (row.get("precision") or "").strip() == "fp8"
    declared = row["model_path"].strip().lower() in FP8_KV_CHECKPOINTS
    system = row.get("system") or ""
    picked = engine_kv_dtype(engine, model, load_system(system).compute_capability) if system else None
    generated = (
        fp8
        and generated_deployment(row.get("silicon_data_source") or "")
        and engine in (Engine.VLLM, Engine.SGLANG)
    )
    if not ((engine == Engine.TRTLLM and fp8) or declared or generated or picked == Dtype.fp8):
        return model
    precision = model.precision.model_copy(update={"kv_cache": Dtype.fp8})
    return model.model_copy(update={"precision": precision})


def to_case(row: dict, configs: Mapping[str, Path] | None = None) -> Case:
    if row.get("mode", "agg") != "agg":
        raise ValueError(f"mode {row.get('mode')} (only aggregated rows are fitted)")
    engine = row["backend"].strip()  # the CSV names the engine "backend"
    if engine not in ENGINES:
        raise ValueError(f"backend {engine}")
    model = fp8_kv_if_unmarked(engine, row, model_of(row, configs))
    parallel, note = parallel_of(row, model.is_moe)
    load_system(row["system"])
    case = Case(
        row_id=row["id"],
        family=family_of(model.name),
        engine=Engine(engine),
        version=row.get("backend_version") or "?",
        model=model,
        parallel=parallel,
        concurrency=concurrency_of(row),
        isl=_int(row, "isl"),
        osl=_int(row, "osl"),
        ttft_ms=float(row["silicon_ttft_ms"]),
        tpot_ms=float(row["silicon_tpot_ms"]),
        note=note,
        system=row["system"],
        measured=measured_date(row),
        silicon_source=row.get("silicon_data_source") or "",
    )
    return with_recipe(case, (row.get("precision") or "").strip() or None)


def skip_reason(e: ValueError) -> str:
    """Why a row is left out, in one line: a validation error's fields and messages (pydantic's own text runs
    over several lines, with a link), GPU counts as N so that one reason counts every such row."""
    if isinstance(e, ValidationError):
        said = "; ".join(
            f"{'.'.join(map(str, err['loc']))}: {err['msg']} (got {err['input']!r})" for err in e.errors()
        )
        return f"{e.title}: {said}"
    return re.sub(r"\d+", "N", str(e)) if "GPUs" in str(e) else str(e)


def build_cases(
    rows: list[dict], system: str, configs: Mapping[str, Path] | None = None
) -> tuple[list[Case], dict[str, int]]:
    """Map the rows of one system; count the rows left out by reason. `configs`: as model_of's."""
    cases: list[Case] = []
    skipped: dict[str, int] = {}
    seen = set()
    # a copy of a measurement comes after the row it copies, so the dated original is the one kept
    rows = [row for row in rows if row.get("system") == system]
    rows.sort(key=lambda row: copied_from_inferencex(row.get("silicon_data_source", "")))
    ties = tie_rows(rows)
    for row in rows:
        try:
            case = to_case(row, configs)
        except ValueError as e:
            reason = skip_reason(e)
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        tie = ties[row["id"]]
        # replayed as plain decoding, an MTP run's TPOT would be read as the engine's (about half of it)
        if tie.spec_decoding not in (None, "none"):
            how = "MTP" if tie.spec_decoding == "mtp" else tie.spec_decoding
            why = f"speculative decoding ({how}) run: InferenceX changelog {tie.commits}"
            skipped[why] = skipped.get(why, 0) + 1
            continue
        case.run = f"{tie.status} {tie.commits}".strip()
        # the same measurement appears under two sources (a database dump and a CSV export): count it once
        same = case.measurement()
        if same in seen:
            why = "duplicate of another row (same engine, architecture, parallel, load and measured values)"
            skipped[why] = skipped.get(why, 0) + 1
            continue
        seen.add(same)
        cases.append(case)
    return cases, skipped
