"""Op benchmarks, one module per op family. BENCH maps each op (keys.KEY_TYPES) to "module:function"; the
functions take the op key and return its timing plus extras. Only workers import them (they import torch)."""

from servelab.perfdb.ops import COMM_OPS, DSV4_CONTEXT_OPS, DSV4_GENERATION_OPS, OpName

_P = "servelab.collect.ops."
BENCH: dict[str, str] = {
    OpName.gemm: _P + "gemm:bench",
    OpName.attention_prefill: _P + "attention:bench_prefill",
    OpName.attention_decode: _P + "attention:bench_decode",
    OpName.mla_prefill: _P + "mla:bench_prefill",
    OpName.mla_decode: _P + "mla:bench_decode",
    **{op: _P + "dsv4:bench_context" for op in DSV4_CONTEXT_OPS},
    **{op: _P + "dsv4:bench_generation" for op in DSV4_GENERATION_OPS},
    OpName.moe: _P + "moe:bench",
    OpName.elementwise: _P + "elementwise:bench",
    **{op: _P + "comm:bench" for op in COMM_OPS},
}

# the collector's op selection accepts these group names as well as single ops
OP_GROUPS: dict[str, tuple[OpName, ...]] = {
    "gemm": (OpName.gemm,),
    "attention": (OpName.attention_prefill, OpName.attention_decode),
    "mla": (OpName.mla_prefill, OpName.mla_decode),
    "dsv4": DSV4_CONTEXT_OPS + DSV4_GENERATION_OPS,
    "moe": (OpName.moe,),
    "elementwise": (OpName.elementwise,),
    "comm": COMM_OPS,
}
