"""Op families: which ops share one table file, and how a table of that family is searched.

A family names the key fields that must match exactly (`group`), the ones that may be borrowed from the
nearest collected shape when a shape was never collected (`soft`), and the one or two fields interpolated
between collected points (`axes`, with the space they are interpolated in). Everything is interpolated as
utilisation against the roofline, so the shape-dependent part that the roofline already knows (flops, bytes,
tile quantization) is not smeared across brackets.
"""

from typing import Literal, NamedTuple

from servelab.errors import ServelabError, closest
from servelab.perfdb import keys
from servelab.perfdb.keys import KeyType
from servelab.perfdb.ops import OpName

Space = Literal["log", "sqrt", "lin"]  # the space an axis is interpolated in
Value = Literal["ratio", "latency"]  # what is interpolated (Family.value)


class Family(NamedTuple):
    name: str  # the table file stem: <name>.parquet
    ops: tuple[OpName, ...]
    key_type: KeyType
    group: tuple[str, ...]  # fields matched exactly (always starts with "op")
    soft: tuple[str, ...]  # group fields that may be borrowed from the nearest collected value (log distance)
    axes: tuple[str, ...]  # interpolated fields; with two, the first is the outer axis
    spaces: tuple[Space, ...]  # per axis
    buckets: bool = False  # soft fields name a model (native heads): borrowing crosses models, say so
    # what is interpolated inside the data: "ratio" = log(measured / reference), i.e. utilisation; "latency" =
    # the measured microseconds themselves (decode: latency is floor + cost x batch x kv_len, exactly
    # bilinear). Beyond the data both hold the boundary utilisation.
    value: Value = "ratio"

    @property
    def fields(self) -> tuple[str, ...]:
        return self.key_type._fields

    @property
    def int_fields(self) -> tuple[str, ...]:
        defaults = self.key_type._field_defaults
        return tuple(
            f
            for f in self.fields
            if f != "op" and not isinstance(defaults.get(f), str) and f not in STRING_FIELDS
        )

    @property
    def str_fields(self) -> tuple[str, ...]:
        return tuple(f for f in self.fields if f not in self.int_fields)


STRING_FIELDS = ("op", *keys.TEXT_FIELDS)
ATTN_GROUP = ("op", "heads", "kv_heads", "head_dim", "window", "kv_dtype")

FAMILIES: tuple[Family, ...] = (
    Family("gemm", (OpName.gemm,), keys.Gemm, ("op", "dtype", "n", "k"), ("n", "k"), ("m",), ("log",)),
    Family(
        "attention_prefill",
        (OpName.attention_prefill,),
        keys.AttentionPrefill,
        ATTN_GROUP,
        ("heads", "kv_heads"),
        ("batch", "seq"),
        ("log", "sqrt"),
    ),
    Family(
        "attention_decode",
        (OpName.attention_decode,),
        keys.AttentionDecode,
        ATTN_GROUP,
        ("heads", "kv_heads"),
        ("batch", "kv_len"),
        ("lin", "lin"),
        value="latency",
    ),
    Family(
        "mla_prefill",
        (OpName.mla_prefill,),
        keys.MlaPrefill,
        ("op", "native_heads", "heads"),
        ("native_heads", "heads"),
        ("batch", "seq"),
        ("log", "sqrt"),
        buckets=True,
    ),
    Family(
        "mla_decode",
        (OpName.mla_decode,),
        keys.MlaDecode,
        ("op", "kv_dtype", "native_heads", "heads"),
        ("native_heads", "heads"),
        ("batch", "kv_len"),
        ("lin", "lin"),
        buckets=True,
        value="latency",
    ),
    Family(
        "dsv4_context",
        keys.DSV4_CONTEXT_OPS,
        keys.Dsv4Context,
        ("op", "native_heads", "heads"),
        ("native_heads", "heads"),
        ("batch", "seq"),
        ("log", "sqrt"),
        buckets=True,
    ),
    # DSv4 decode: utilisation, not latency, because the sparse attention saturates at index_topk (kv_len / 4
    # = topk, a kink the roofline knows and a bilinear latency does not): leave-one-out p90 14.4 % vs 15.3 %
    # on H200
    Family(
        "dsv4_generation",
        keys.DSV4_GENERATION_OPS,
        keys.Dsv4Generation,
        ("op", "native_heads", "heads"),
        ("native_heads", "heads"),
        ("batch", "kv_len"),
        ("log", "sqrt"),
        buckets=True,
    ),
    Family(
        "moe",
        (OpName.moe,),
        keys.Moe,
        ("op", "dtype", "distribution", "hidden", "inter", "experts", "topk", "ep"),
        (),
        ("tokens",),
        ("log",),
    ),
    Family("comm", keys.COMM_OPS, keys.Comm, ("op", "gpus"), (), ("bytes",), ("log",)),
    Family("elementwise", (OpName.elementwise,), keys.Memory, ("op", "kernels"), (), ("bytes",), ("log",)),
)

BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}
BY_OP: dict[str, Family] = {op: f for f in FAMILIES for op in f.ops}
# the tables the accuracy targets apply to (median <= 5 %, p90 <= 15 % leave-one-out)
ACCURACY_TARGETS = {"gemm": (0.05, 0.15), "attention_prefill": (0.05, 0.15), "attention_decode": (0.05, 0.15)}


def family_of(op: str) -> Family:
    fam = BY_OP.get(op)
    if fam is None:
        raise ServelabError(f"unknown op {op!r}{closest(op, list(BY_OP))}; known ops: {', '.join(BY_OP)}")
    return fam
