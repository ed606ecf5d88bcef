"""Engine profiles: what an engine adds to the kernel time of a step (scheduling, sampling, launch gaps,
CUDA graphs for decode), its API server's CPU costs, its token budget and KV-cache rule, and its scheduling
policy, with the fitted overheads of a calibration file (`servelab calibrate engines`; the shipped
predict/data/calibrated.json unless another is named).

Each engine's documented defaults come from its package (servelab/engines/<engine>/defaults.json, with where
each value was read) and its scheduling rules from its policy (servelab/engines/<engine>/policy.py: what a
step carries, the KV kept for admitted requests' future output, preemption, holds), which the simulator
calls; the kernels-only `torch` backend's profile and the step-level structure band are predict's own
(predict/data/engines.json). What the fields do to a prediction:
- `kv_static_fraction`: SGLang's KV rule (memory.memory_per_gpu, static_fraction); `cuda_graph_by_split`:
  its CUDA-graph batch by GPU memory and tp (256 below tp 4 and 512 from tp 4 on an H100 or H200).
- `budget_by_gpu_gib`: a token budget that defaults by GPU memory (SGLang `server_args.py`:
  chunked_prefill_size 2048 below 35 GiB, 4096 below 60, 8192 below 160 (H100, H200), 16384 above (B200)).
  vLLM's max_num_batched_tokens and max_num_seqs follow its release's rule by GPU memory and name instead
  (servelab.engines.vllm.batch: 8192 tokens and 1024 sequences on an H100 or H200, 16384 and 1024 from 160
  GiB in 0.28.0 on, 2048 and 256 on an A100 or a smaller GPU).
- `api_request_us`, `api_prompt_token_us`: the API server's own serial work before a request reaches the
  scheduler (HTTP, validation, tokenizing the prompt), shared by every lane of a replica;
  `api_output_token_us`: its work per streamed output token (detokenize, build and send the chunk), which
  takes the same CPU, so a request arriving while the replica streams r tokens/s is handled
  1 / (1 - r x api_output_token_us) slower, unless the policy's API server streams serially (SGLang's
  serial_output_stream, and vLLM V1's): then the streaming is queued work of that one process, and a client
  sees a token, and sends its next request, when the queue has handled it; `api_step_us` is that queue's
  work per engine step whose outputs it takes in, whatever the batch (vLLM: 520 us on an H100 host), and
  `api_chunk_us` its work per chunk sent, one a token while it keeps up, a request's tokens merged into one
  when it lags and the step's outputs fit the policy's one output slice (vLLM: 67.2 us, 128 requests a slice;
  Lane.stream_out). `stream_interval` (a launch's --stream-interval N): a running request's tokens become a
  chunk N at a time, its first at once, so the chunks are divided by N and the tokens' own work is not
  (vLLM's RequestState.make_request_output, v1/engine/output_processor.py, 0.25.0, which detokenizes every
  token as it comes).
- `moe_prompt_token_us`: GPU time per prompt token per MoE layer a step spends beyond the priced kernels
  (fitted; documented default 0). Prompt tokens make MoE compute-bound, and there the engines run narrow
  expert GEMMs (the expert width divided by TP) and routing, sorting and gathering of every token of the TP
  group far below the efficiency the perf tables and roofline assume, the same on every TP rank; decode
  steps are memory-bound and priced right, so they do not pay it.
- `eager_moe_route_us`: CPU time per MoE layer and per expert a token is routed to (the model's experts per
  token, top-k), in a step run outside CUDA graphs (fitted; documented default 0): the engines run prompt
  steps eagerly, and a MoE layer's Python path (routing, expert-dispatch set-up, Triton launches, host syncs)
  costs milliseconds of CPU each. It is hidden when the step's kernels are longer, so it shows at high TP and
  short prompts, where TensorRT-LLM's and SGLang's DeepSeek and gpt-oss first tokens wait 100-300 ms that no
  kernel explains. Per routed expert, not per layer: TensorRT-LLM's DeepSeek (8 experts a token) wants twice
  gpt-oss's (4) per layer, and SGLang's DeepSeek and Qwen3-235B (8 each, 256 and 128 experts) want the same,
  which rules out the expert count and the hidden size (docs/accuracy.md section 5).
- `moe_route_us`: GPU time per MoE layer and per expert a token is routed to, per step, beyond the priced
  kernels (fitted; documented default 0): the fused-MoE path's fixed latency (routing, sort, gather, the
  expert GEMMs' and finalize kernels' floors), which the roofline prices as bytes alone.
- `policy`: the engine's scheduling policy (servelab.engines.policy); its settings (TensorRT-LLM's
  attention_dp_balance, SGLang's mixed_chunk, ...) are set through the profile like its own fields
  (`engine_profile(name, attention_dp_balance=True)`, `profile.model_copy(update=...)`).
"""

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError, model_validator

from servelab.engines import MODELLED, Engine, moe_code_family, router_dtype
from servelab.engines.defaults import EngineDefaults, KvCacheRule, engine_defaults
from servelab.engines.policy import KERNELS_ONLY, SchedulingPolicy
from servelab.engines.policy_registry import policy_for
from servelab.engines.trtllm.moe import unfitted_backend
from servelab.engines.vllm.batch import async_scheduling_default, reserve_full_prompt_default
from servelab.engines.vllm.batch import batch_defaults as vllm_batch_defaults
from servelab.engines.vllm.runner import largest_cudagraph_size
from servelab.errors import ServelabError, closest
from servelab.predict.fit_reach import FitReach
from servelab.specs import MlaFp8KvLayout, ModelSpec, SystemSpec
from servelab.userfiles import check_regular

ENGINE_NAMES = (KERNELS_ONLY, *(e.value for e in MODELLED))  # torch: kernels alone, no engine overhead


class EngineProfile(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    step_overhead_us: float  # CPU time per step the GPU waits for (schedule, prepare inputs, sample)
    per_seq_overhead_us: float  # per running sequence per step
    kernel_gap_us: float  # idle time between kernels inside a CUDA graph
    eager_launch_us: float  # CPU launch cost per kernel outside graphs (hidden when kernels are longer)
    cuda_graph_max_batch: int  # decode steps up to this batch replay a CUDA graph
    # ... and, where True, any step of up to that many tokens on a rank, mixed ones too: vLLM V1 captures a
    # PIECEWISE graph (attention run between the pieces) for every capture size and dispatches a batch of
    # prompt chunks and decodes to the smallest size that holds its tokens (v1/cudagraph_dispatcher.py,
    # 0.25.0); a step over the largest size runs the compiled model eagerly
    graphs_by_tokens: bool = False
    # vLLM: the launch's --max-cudagraph-capture-size, which sizes the CUDA graphs its KV sizing subtracts
    # (None: not set, vLLM's rule from max_num_seqs; predict.memory.memory_per_gpu)
    max_cudagraph_capture_size: int | None = None
    max_num_batched_tokens: int
    max_num_seqs: int
    chunked_prefill: bool
    # the KV cache gets this share of the memory left after weights and activations (TensorRT-LLM's
    # free_gpu_memory_fraction), not the rest of a share of the whole GPU (vLLM's gpu_memory_utilization)
    kv_of_free: bool = False
    api_request_us: float = 0.0  # API server CPU per request before it reaches the scheduler
    api_prompt_token_us: float = 0.0  # ... per prompt token (tokenizing)
    api_output_token_us: float = 0.0  # ... per output token streamed (detokenize, send)
    api_step_us: float = 0.0  # ... per engine step whose outputs it takes in (serial output stream only)
    api_chunk_us: float = 0.0  # ... per streamed chunk, a request's tokens merged into one when it lags
    # tokens a running request's chunk waits for (vLLM's and SGLang's --stream-interval, TensorRT-LLM's
    # stream_interval): it divides the running requests' chunks, not their tokens' work
    stream_interval: int = Field(1, ge=1)
    moe_prompt_token_us: float = 0.0  # per prompt token per MoE layer a step runs (see the module docstring)
    # the default token budget by GPU memory: (below this many GiB per GPU, tokens), the last without a bound
    budget_by_gpu_gib: tuple[tuple[float | None, int], ...] = ()
    kernel_band_low: float = 1.0  # step-level structure error of the kernel sum (measured, engines.json)
    kernel_band_high: float = 1.0
    source: str = "documented defaults"
    # the KV cache is SGLang's mem_fraction_static of the GPU less the weights, the fraction derived from the
    # GPU's memory, the split and the chunked-prefill size (memory.sglang_mem_fraction_static)
    kv_static_fraction: bool = False
    # cuda_graph_max_batch is SGLang's default for the GPU's memory and tp (memory.sglang_cuda_graph_max_bs);
    # a cuda_graph_max_batch set over the profile must turn this off (engine_profile does)
    cuda_graph_by_split: bool = False
    # how the engine stores an FP8 MLA cache entry (specs.attention.MlaFp8KvLayout); None: the model spec's
    # own (DeepSeek's FlashMLA layout, kept for vLLM)
    mla_fp8_kv_layout: MlaFp8KvLayout | None = None
    eager_moe_route_us: float = 0.0  # CPU per MoE layer and routed expert of an eager step (see above)
    moe_route_us: float = 0.0  # GPU per MoE layer and routed expert per step beyond the kernels (ditto)
    # the rows a calibration fitted the MoE terms on, which bound where they apply (running); None: no
    # record (documented defaults, a file without it, terms set by hand), applied as given
    moe_fit: FitReach | None = None
    # how the engine's scheduler forms steps, admits, reserves, preempts and holds (given: the engine's own
    # policy with its documented defaults)
    policy: SerializeAsAny[SchedulingPolicy]

    @model_validator(mode="before")
    @classmethod
    def _engine_policy(cls, data: Any) -> Any:
        """A profile without a policy follows its engine's (by name)."""
        if isinstance(data, dict) and data.get("policy") is None and "name" in data:
            data = {**data, "policy": policy_for(data["name"])}
        return data

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """As BaseModel.model_copy; keys of `update` that are not the profile's fields set the policy's (one
        line naming the key if the engine's policy has no such setting either)."""
        if update:
            own = {k: v for k, v in update.items() if k in type(self).model_fields}
            settings = {k: v for k, v in update.items() if k not in own}
            if settings:
                policy = own.get("policy", self.policy)
                own["policy"] = policy.with_settings(settings, self.name)
            update = own
        return super().model_copy(update=update, deep=deep)

    def model_as_served(self, model: ModelSpec) -> ModelSpec:
        """The model with its KV cache laid out as this engine lays it out (every KV count reads this), and
        its router GEMM in the format the engine runs it in (servelab.engines.router_dtype; the kernels-only
        torch backend keeps the model's)."""
        served = model.with_mla_fp8_kv_layout(self.mla_fp8_kv_layout)
        if self.name in MODELLED:
            served = served.with_router_dtype(router_dtype(Engine(self.name), model.architecture))
        return served

    def running(self, model: ModelSpec, system: SystemSpec) -> Self:
        """The profile as it runs `model` on `system`: the MoE terms (MOE_TERMS) a calibration fitted are
        not carried where their evidence does not reach (servelab.predict.fit_reach: another model family on
        another system than the fit's rows), nor to TensorRT-LLM's MXFP4 experts on another backend than the
        fit's rows ran (TRTLLMGenFusedMoE on Blackwell: servelab.engines.trtllm.moe); there the experts are
        priced by their kernels alone, and the profile's source says why. On another system than the fit's,
        the terms of GPU time (GPU_MOE_TERMS) stay behind too: the fit's family keeps only its CPU term."""
        if model.moe is None or not any(getattr(self, t) for t in MOE_TERMS):
            return self
        backend = unfitted_backend(model.precision.experts, system.compute_capability)
        if self.name == Engine.TRTLLM and backend is not None:
            return self._without_moe_terms(f"fitted on TRITON / CUTLASS MoE rows, this runs {backend}")
        applied, why = self.moe_terms_reach(model, system)
        if not applied:
            return self._without_moe_terms(why)
        if self.moe_fit is not None and system.name not in self.moe_fit.systems:
            on = ", ".join(self.moe_fit.systems)
            return self._without_moe_terms(f"GPU time fitted on {on}, this is {system.name}", GPU_MOE_TERMS)
        return self

    def moe_terms_reach(self, model: ModelSpec, system: SystemSpec) -> tuple[bool, str]:
        """Whether the calibration's MoE terms reach `model` on `system`, and why (a profile without the
        record of its fit's rows, or with terms set by hand: they apply as given)."""
        if self.moe_fit is None:
            return True, "no record of the rows they were fitted on: applied as given"
        return self.moe_fit.verdict(model.name, system.name, moe_code_family(self.name, model.architecture))

    def _without_moe_terms(self, why: str, terms: tuple[str, ...] | None = None) -> Self:
        terms = MOE_TERMS if terms is None else terms
        note = f"{', '.join(terms)} not applied: {why}"
        return self.model_copy(update={**dict.fromkeys(terms, 0.0), "source": f"{self.source}; {note}"})

    @property
    def kv_rule(self) -> dict[str, Any]:
        """How this engine sizes its KV cache, as predict.memory.memory_per_gpu takes it. vLLM sizes its
        profile run and CUDA graphs by its sequence cap and largest graph size, so they go with its rule."""
        rule: dict[str, Any] = {
            "fraction_of_free": self.kv_of_free,
            "static_fraction": self.kv_static_fraction,
        }
        if self.name == Engine.VLLM:
            rule["max_num_seqs"] = self.max_num_seqs
            rule["max_cudagraph_capture_size"] = self.max_cudagraph_capture_size
        return rule

    def overhead_us(self, num_seqs: int) -> float:
        return self.step_overhead_us + self.per_seq_overhead_us * num_seqs


FITTED = (
    "step_overhead_us",
    "per_seq_overhead_us",
    "kernel_gap_us",
    "eager_launch_us",
    "moe_prompt_token_us",
    "eager_moe_route_us",
    "moe_route_us",
)
# the fitted terms that price a MoE layer's kernels beyond their tables or roofline (see the docstring)
MOE_TERMS = ("moe_prompt_token_us", "eager_moe_route_us", "moe_route_us")
# ... those that price GPU time (the rest, eager_moe_route_us, the host's CPU): a GPU's own, not carried to
# another (servelab.predict.fit_reach)
GPU_MOE_TERMS = ("moe_prompt_token_us", "moe_route_us")
CALIBRATION_FORMATS = (1, 2)  # 1: the first shipped file, without the key


class EngineFit(BaseModel):
    params: dict[str, float]
    models: list[str] = []  # the models of the rows it was fitted on (older files: none recorded)


class FitSettings(BaseModel):
    system: str | None = None  # the system the rows were measured on


class FitProvenance(BaseModel):
    """The part of a calibration's record that bounds where its MoE terms apply (none: not bounded)."""

    settings: FitSettings = FitSettings()


class Calibration(BaseModel):
    """What a calibration file must hold for pricing; the rest (errors, sources) is its record."""

    calibration_format: int = 1
    provenance_line: str = Field("servelab calibrate engines", alias="_provenance")
    provenance: FitProvenance | None = None  # the first shipped file: none
    engines: dict[str, EngineFit]

    def moe_fits(self) -> dict[str, FitReach]:
        """By engine, the rows its MoE terms were fitted on, where the file records them."""
        return {name: reach for name in self.engines if (reach := self.moe_fit(name)) is not None}

    def moe_fit(self, engine: str) -> FitReach | None:
        """The rows the engine's MoE terms were fitted on, where the file records them."""
        fit = self.engines[engine]
        system = self.provenance.settings.system if self.provenance is not None else None
        if system is None or not fit.models:
            return None
        return FitReach.of(fit.models, [system])


def shipped_calibration() -> Path:
    return Path(str(resources.files("servelab.predict") / "data" / "calibrated.json"))


@cache
def read_calibration(path: Path) -> Calibration:
    """A calibration file, checked; one line naming the file and what is wrong otherwise."""
    where = f"calibration file {path}"
    check_regular(path, "calibration")  # a FIFO would be waited on forever
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ServelabError(f"{where}: cannot read ({e.strerror})", field="calibration") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ServelabError(f"{where}: not JSON ({e})", field="calibration") from None
    try:
        cal = Calibration.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        at = ".".join(str(p) for p in first["loc"]) or "top level"
        raise ServelabError(
            f"{where}: {at}: {first['msg']} (expected the output of servelab calibrate engines)",
            field="calibration",
        ) from None
    if cal.calibration_format not in CALIBRATION_FORMATS:
        raise ServelabError(
            f"{where}: calibration_format {cal.calibration_format}; this servelab reads "
            f"{', '.join(map(str, CALIBRATION_FORMATS))}",
            field="calibration",
        )
    for engine, fit in cal.engines.items():
        unknown = sorted(set(fit.params) - set(FITTED))
        bad = sorted(k for k, v in fit.params.items() if not v >= 0)  # also refuses nan
        if engine not in ENGINE_NAMES or unknown or bad:
            what = f"unknown engine {engine}" if engine not in ENGINE_NAMES else f"{engine}: "
            what += f"unknown parameters {unknown}" if unknown else ""
            what += f"negative or nan {bad}" if bad else ""
            raise ServelabError(f"{where}: {what}; expected {', '.join(FITTED)} >= 0", field="calibration")
    return cal


@cache
def _torch_and_band() -> dict:
    """predict/data/engines.json: the kernels-only backend's profile and the step-level structure band."""
    return json.loads((resources.files("servelab.predict") / "data" / "engines.json").read_text())


def _from_defaults(d: EngineDefaults) -> dict[str, Any]:
    """An engine's documented defaults as EngineProfile fields."""
    fields = d.model_dump(exclude={"provenance", "kv_cache_rule"})
    fields["kv_of_free"] = d.kv_cache_rule == KvCacheRule.free_share
    fields["kv_static_fraction"] = d.kv_cache_rule == KvCacheRule.static_fraction
    return fields


@cache
def documented_profiles() -> dict[str, EngineProfile]:
    """Every backend's profile from its documented defaults alone (no calibration file)."""
    data = _torch_and_band()
    band = data.get("step_structure_band", {})
    profiles = {}
    for name in ENGINE_NAMES:
        fields = data[name] if name == KERNELS_ONLY else _from_defaults(engine_defaults(Engine(name)))
        profiles[name] = EngineProfile(
            name=name,
            source="documented defaults",
            kernel_band_low=band.get("low", 1.0),
            kernel_band_high=band.get("high", 1.0),
            **fields,
        )
    return profiles


@cache
def _profiles(calibration: Path) -> dict:
    shipped_missing = calibration == shipped_calibration() and not calibration.is_file()
    fitted = None if shipped_missing else read_calibration(calibration)
    profiles = {}
    for name, documented in documented_profiles().items():
        if fitted is not None and name in fitted.engines:
            source = f"calibrated ({calibration.name}: {fitted.provenance_line})"
            update = {**fitted.engines[name].params, "source": source, "moe_fit": fitted.moe_fit(name)}
            profiles[name] = documented.model_copy(update=update)
        elif fitted is not None:
            source = f"documented defaults ({calibration.name} keeps no {name} fit)"
            profiles[name] = documented.model_copy(update={"source": source})
        else:
            profiles[name] = documented
    return profiles


def engine_profile(
    name: str,
    gpu_gib: float | None = None,
    calibration: Path | str | None = None,
    *,
    gpu_name: str = "",
    engine_version: str | None = None,
    **overrides,
) -> EngineProfile:
    """The engine's profile under a calibration file (None: the shipped one), with `overrides` applied.

    gpu_gib (memory per GPU) picks the default token budget where that depends on the GPU, unless
    max_num_batched_tokens is given: SGLang's chunked_prefill_size, and vLLM's max_num_batched_tokens and
    max_num_seqs, which its release `engine_version` (None: not known, the newest rule) derives from the
    memory and the GPU's name `gpu_name` (servelab.engines.vllm.batch); the profile's source says which rule
    applied. Without gpu_gib the documented defaults stand."""
    profiles = _profiles(_calibration_path(calibration))
    if name not in profiles:
        raise ServelabError(
            f"unknown engine {name!r}{closest(name, list(profiles))}; "
            f"expected one of {', '.join(ENGINE_NAMES)}",
            field="backend",
        )
    profile = profiles[name]
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if "cuda_graph_max_batch" in overrides:  # a batch given replaces SGLang's default for the split
        overrides["cuda_graph_by_split"] = False
    if any(t in overrides for t in MOE_TERMS):  # MoE terms set by hand are not the fit's: applied as given
        overrides["moe_fit"] = None
    if gpu_gib is not None and "max_num_batched_tokens" not in overrides:
        for below, tokens in profile.budget_by_gpu_gib:
            if below is None or gpu_gib < below:
                overrides["max_num_batched_tokens"] = tokens
                break
    if gpu_gib is not None and name == Engine.VLLM:
        overrides.update(vllm_batch(profile, gpu_gib, gpu_name, engine_version, overrides))
    return profile.model_copy(update=overrides) if overrides else profile


def _calibration_path(calibration: Path | str | None) -> Path:
    return Path(calibration).resolve() if calibration is not None else shipped_calibration()


def fitted_params(name: str, calibration: Path | str | None = None) -> dict[str, float]:
    """The engine's terms a calibration file (None: the shipped one) fits, by profile field; the others are
    its documented defaults."""
    path = _calibration_path(calibration)
    if path == shipped_calibration() and not path.is_file():
        return {}
    fit = read_calibration(path).engines.get(name)
    return dict(fit.params) if fit is not None else {}


def vllm_batch(
    profile: EngineProfile, gpu_gib: float, gpu_name: str, version: str | None, given: dict[str, Any]
) -> dict[str, Any]:
    """vLLM's batch defaults for the GPU and release where the launch set none, and its release's async
    scheduling and whole-prompt admission where the launch did not say, with the profile's source saying
    which rules gave them. A default max_num_seqs is at most the token budget, as vLLM caps it."""
    update: dict[str, Any] = {}
    notes = []
    if "max_num_batched_tokens" not in given or "max_num_seqs" not in given:
        rule = vllm_batch_defaults(gpu_gib, gpu_name, version)
        tokens = given.get("max_num_batched_tokens", rule.max_num_batched_tokens)
        update["max_num_batched_tokens"] = tokens
        if "max_num_seqs" not in given:
            update["max_num_seqs"] = min(rule.max_num_seqs, tokens)
        kept = [k for k in ("max_num_batched_tokens", "max_num_seqs") if k in given]
        notes.append(f"batch defaults: {rule.why}" + (f" ({' and '.join(kept)} as given)" if kept else ""))
    if "cuda_graph_max_batch" in given:  # the launch's capture size also sizes the graphs' memory
        update["max_cudagraph_capture_size"] = given["cuda_graph_max_batch"]
    # the largest step a graph replays, in tokens
    seqs = update.get("max_num_seqs", given.get("max_num_seqs", profile.max_num_seqs))
    tokens = update.get(
        "max_num_batched_tokens", given.get("max_num_batched_tokens", profile.max_num_batched_tokens)
    )
    update["cuda_graph_max_batch"] = largest_cudagraph_size(seqs, tokens, given.get("cuda_graph_max_batch"))
    if "async_scheduling" not in given:
        update["async_scheduling"], why = async_scheduling_default(version)
        notes.append(why)
    if "reserve_full_prompt" not in given:
        update["reserve_full_prompt"], why = reserve_full_prompt_default(version)
        notes.append(why)
    update["source"] = "; ".join([given.get("source", profile.source), *notes])
    return update
