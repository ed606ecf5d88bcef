"""The parameters an engine calibration fits, with the bounds of their log-space search."""

from collections.abc import Callable
from typing import Any

from servelab.predict.engines import FITTED

# the engine-profile parameters fitted, each searched in log space between these bounds (us); the documented
# defaults start the search. The API server's costs (EngineProfile.api_*) are not fitted: they enter through a
# queue whose service time is stretched by 1 / (1 - streamed tokens/s x cost per token), and values fitted on
# some model families saturate it on a faster one (left one model out on 180 rows,
# `accuracy/calibrate_engines.py --limit 60`: TTFT p90 1,825 % fitting all three terms, 1,596 % fitting the
# two intake terms); they keep their documented values.
PARAMS = FITTED  # the fields a calibration file may carry are the ones fitted
BOUNDS = {
    "step_overhead_us": (1.0, 20000.0),
    "per_seq_overhead_us": (0.01, 500.0),
    "kernel_gap_us": (0.01, 50.0),
    "eager_launch_us": (0.1, 100.0),
    # per prompt token per MoE layer (EngineProfile.moe_prompt_token_us): on vLLM's and SGLang's MoE rows
    # TTFT is 1.5-5x the prediction while the dense rows agree (docs/accuracy.md)
    "moe_prompt_token_us": (0.001, 10.0),
    # per MoE layer and expert a token is routed to, CPU of an eager step (EngineProfile.eager_moe_route_us):
    # TensorRT-LLM's and SGLang's DeepSeek and gpt-oss first tokens at high TP; and GPU per step
    # (moe_route_us). Per route: a MoE layer routing to 4 experts a token is searched up to 20 ms of CPU
    "eager_moe_route_us": (0.25, 5000.0),
    "moe_route_us": (0.025, 250.0),
}
# The nested parameter sets each engine's fit chooses among, largest first: every set is fitted and
# cross-validated, and the engine keeps the one with the best cross-validated score
# (calibration_file.verdicts); the parameters outside it keep their documented defaults. A term fitted on some
# families can send a family it never saw far off while the other terms transfer: vLLM's MoE route GPU cost,
# fitted on Qwen3-235B's block-FP8 decode, doubles gpt-oss's TPOT, whose MXFP4 kernels have no such floor;
# the smaller sets let an engine keep the terms that do transfer.
_MOE_LAYER_TERMS = ("eager_moe_route_us", "moe_route_us")
PARAM_SETS: dict[str, tuple[str, ...]] = {
    "all": PARAMS,
    "no_moe_layer_gpu": tuple(p for p in PARAMS if p != "moe_route_us"),
    "no_moe_layer_terms": tuple(p for p in PARAMS if p not in _MOE_LAYER_TERMS),
    # the MoE layer terms alone, the engine's overheads at their documented values: fitted on MoE families
    # only, the step overhead a fit trades against the MoE layer cost would move a dense family it never saw
    "moe_layer_terms_only": _MOE_LAYER_TERMS,
}
# Where a fit starts instead of the documented default: a default of 0 (a term the engine does not pay
# unless the calibration says so) is out of reach of the log-space search. The errors "at the defaults" are
# still those of the documented profile.
# (the MoE route terms start at 2 ms and 20 us per layer of a model routing to 4 experts a token)
FIT_START = {"moe_prompt_token_us": 0.3, "eager_moe_route_us": 500.0, "moe_route_us": 5.0}
# Terms servelab's step model does not have, fitted only on request to measure what they would buy: a fixed
# per-request cost on the way to the first token (HTTP, tokenization, detokenization, the engine's first
# schedule), one that grows with the number of requests in flight (a front end serving them one at a
# time) and one per prompt token (input processing outside the kernels). Each maps a case to its coefficient.
TTFT_TERMS: dict[str, Callable[[Any], float]] = {
    "ttft_overhead_ms": lambda c: 1.0,
    "ttft_per_request_ms": lambda c: float(c.concurrency),
    "ttft_per_kilotoken_ms": lambda c: c.isl / 1000.0,
}
BOUNDS.update(
    {
        "ttft_overhead_ms": (0.01, 5000.0),
        "ttft_per_request_ms": (0.0001, 100.0),
        "ttft_per_kilotoken_ms": (0.001, 1000.0),
    }
)
TTFT_START = {
    "ttft_overhead_ms": 10.0,
    "ttft_per_request_ms": 0.1,
    "ttft_per_kilotoken_ms": 1.0,
}
# Also fitted only on request: a factor on the kernel time of each op family, for kernels the engines run that
# the perf tables (timed on reference implementations) do not: FlashMLA / FlashInfer attention, custom
# all-reduce, fused MoE. EngineProfile has no such field; the report says what they would buy.
KERNEL_FAMILIES = {
    "AttentionDecode": "attention_scale",
    "AttentionPrefill": "attention_scale",
    "MlaDecode": "attention_scale",
    "MlaPrefill": "attention_scale",
    "Dsv4Context": "attention_scale",
    "Dsv4Generation": "attention_scale",
    "Comm": "comm_scale",
    "Moe": "moe_scale",
    "Gemm": "gemm_scale",
}
KERNEL_TERMS = tuple(sorted(set(KERNEL_FAMILIES.values())))
BOUNDS.update({name: (0.1, 10.0) for name in KERNEL_TERMS})
