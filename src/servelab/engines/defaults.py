"""An engine's documented defaults: what it runs with when a launch sets nothing, and where each value was
read. Each engine's package keeps its own in defaults.json beside it, read through `EngineDefaults`.

Common to every engine: the overheads per step and per sequence (step_overhead_us, per_seq_overhead_us,
kernel_gap_us, eager_launch_us) are starting values, of the order of magnitude of published CPU-overhead
profiles; `servelab calibrate engines` refits them on measured end-to-end results and writes them to a
calibration file (servelab/predict/data/calibrated.json is the shipped one). The API server's costs are
starting values too (about a microsecond to tokenize a prompt token, a millisecond of HTTP and request
set-up, 10-30 us to detokenize and stream an output token), fitted by the same command. moe_prompt_token_us
(GPU time per prompt token per MoE layer beyond the priced kernels), eager_moe_route_us (CPU time per MoE
layer and per expert a token is routed to, of a step run outside CUDA graphs, which the GPU waits for only
when its kernels are shorter) and moe_route_us (GPU time per MoE layer and routed expert per step beyond the
priced kernels) are 0 by default: they are measured gaps, not documented costs, and only the calibration sets
them, per engine, where its cross-validated fit beats the defaults. servelab.predict.engines says what each
field does to a prediction.
"""

from __future__ import annotations

import json
from enum import StrEnum
from functools import cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.engines.names import Engine
from servelab.errors import ServelabError
from servelab.specs import MlaFp8KvLayout


class KvCacheRule(StrEnum):
    """How an engine sizes its KV cache from its memory share."""

    # weights, activations and the KV cache share a fraction of the whole GPU; the cache gets the rest (vLLM's
    # gpu_memory_utilization)
    gpu_share = "gpu_share"
    # the cache gets a fraction of the memory left after loading the weights and profiling a forward pass at
    # the token budget (TensorRT-LLM's KvCacheConfig.free_gpu_memory_fraction)
    free_share = "free_share"
    # weights and the KV cache get a fraction of the GPU derived from its memory, the split and the
    # chunked-prefill size (SGLang's mem_fraction_static; predict.memory.sglang_mem_fraction_static)
    static_fraction = "static_fraction"


class EngineDefaults(BaseModel):
    """One engine's documented defaults, with the sources they were read from (`provenance`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    provenance: str = Field(alias="_provenance")
    max_num_batched_tokens: int = Field(ge=1)  # the token budget of a step
    # the budget by GPU memory instead, where the engine derives it: (below this many GiB per GPU, tokens),
    # the last without a bound
    budget_by_gpu_gib: tuple[tuple[float | None, int], ...] = ()
    max_num_seqs: int = Field(ge=1)
    chunked_prefill: bool
    # prompt blocks computed once are kept and reused by a later prompt that starts with them (vLLM's prefix
    # caching, SGLang's radix cache, TensorRT-LLM's KV block reuse)
    prefix_caching: bool
    cuda_graph_max_batch: int = Field(ge=0)  # decode steps up to this batch replay a CUDA graph
    # the CUDA-graph batch is the engine's own default for the GPU's memory and tp instead
    # (predict.memory.sglang_cuda_graph_max_bs)
    cuda_graph_by_split: bool = False
    # ... counted in tokens on a rank, and mixed steps replay one too (vLLM V1's piecewise graphs)
    graphs_by_tokens: bool = False
    kv_cache_rule: KvCacheRule
    # how the engine stores an FP8 MLA cache entry; None: the model spec's own layout
    mla_fp8_kv_layout: MlaFp8KvLayout | None = None
    api_request_us: float = Field(ge=0)  # API-server CPU per request before the scheduler sees it
    api_prompt_token_us: float = Field(ge=0)  # ... per prompt token (tokenizing)
    api_output_token_us: float = Field(ge=0)  # ... per output token streamed (detokenize, send)
    api_step_us: float = Field(0.0, ge=0)  # ... per engine step whose outputs it handles (a serial stream)
    api_chunk_us: float = Field(0.0, ge=0)  # ... per streamed chunk, merged when it falls behind (ditto)
    step_overhead_us: float = Field(ge=0)
    per_seq_overhead_us: float = Field(ge=0)
    kernel_gap_us: float = Field(ge=0)
    eager_launch_us: float = Field(ge=0)
    moe_prompt_token_us: float = Field(0.0, ge=0)
    eager_moe_route_us: float = Field(0.0, ge=0)
    moe_route_us: float = Field(0.0, ge=0)


@cache
def engine_defaults(engine: Engine) -> EngineDefaults:
    """The documented defaults of an engine (servelab/engines/<engine>/defaults.json)."""
    path = resources.files(f"servelab.engines.{engine.value}") / "defaults.json"
    try:
        return EngineDefaults.model_validate(json.loads(path.read_text()))
    except json.JSONDecodeError as e:
        raise ServelabError(f"{path}: not JSON ({e})", field="defaults") from None
    except ValidationError as e:
        raise ServelabError.from_validation(e, str(path)) from None
