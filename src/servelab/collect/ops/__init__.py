"""Op benchmarks, one module per op family. BENCH maps each op (keys.KEY_TYPES) to "module:function"; the
functions take the op key and return its timing plus extras. Only workers import them (they import torch)."""

from servelab.perfdb.keys import COMM_OPS, DSV4_CONTEXT_OPS, DSV4_GENERATION_OPS

_P = "servelab.collect.ops."
BENCH: dict[str, str] = {
    "gemm": _P + "gemm:bench",
    "attention_prefill": _P + "attention:bench_prefill",
    "attention_decode": _P + "attention:bench_decode",
    "mla_prefill": _P + "mla:bench_prefill",
    "mla_decode": _P + "mla:bench_decode",
    **{op: _P + "dsv4:bench_context" for op in DSV4_CONTEXT_OPS},
    **{op: _P + "dsv4:bench_generation" for op in DSV4_GENERATION_OPS},
    "moe": _P + "moe:bench",
    "elementwise": _P + "elementwise:bench",
    **{op: _P + "comm:bench" for op in COMM_OPS},
}

# --ops accepts these family names as well as single ops
FAMILIES: dict[str, tuple[str, ...]] = {
    "gemm": ("gemm",),
    "attention": ("attention_prefill", "attention_decode"),
    "mla": ("mla_prefill", "mla_decode"),
    "dsv4": DSV4_CONTEXT_OPS + DSV4_GENERATION_OPS,
    "moe": ("moe",),
    "elementwise": ("elementwise",),
    "comm": COMM_OPS,
}

WORKER_INIT = _P + "runtime:init_worker"
