"""Which op keys a campaign measures: the keys the predictor asks for (servelab.predict.graph.step_ops) for
each model at tp 1, 2, 4, 8 with and without ep / dp_attn where valid, over a grid of step shapes, plus a base
grid.

Models run at the precision the system can serve: a checkpoint whose FP4 experts the GPU cannot run is planned
with its FP8 conversion (check_precision's advice), a checkpoint of another model with that model's own
precision where the GPU runs it (NVIDIA's NVFP4 DeepSeek-R1: DeepSeek-R1's FP8), else with bf16 experts. By
default a campaign plans every embedded model and every embedded checkpoint that sets its own precision
(Qwen/Qwen3-235B-A22B-FP8 runs its GEMMs and experts in FP8 blocks, so it asks for other keys than the bf16
model of the same architecture). FP8 GEMMs also get a dense grid of M up to 512: cuBLAS switches tile shapes
there, so latency steps (up to 1.8x) between the TOKENS points, and interpolating across a step missed by up
to 75 % on the H200.
"""

from servelab.collect.ops import BENCH, OP_GROUPS
from servelab.errors import ServelabError, closest
from servelab.perfdb.keys import (
    AttentionDecode,
    AttentionPrefill,
    Comm,
    Dsv4Context,
    Dsv4Generation,
    Gemm,
    Memory,
    MlaDecode,
    MlaPrefill,
    Moe,
    OpKey,
)
from servelab.perfdb.ops import COMM_OPS, OpName
from servelab.predict.graph import StepShape, step_ops
from servelab.specs import (
    FP8_CONVERSIONS,
    Parallel,
    check_precision,
    list_checkpoints,
    list_models,
    load_model,
)

TPS = (1, 2, 4, 8)
# tokens per attention rank in one step: GEMM, MoE and elementwise keys
TOKENS = (1, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
# FP8 GEMM rows (m): TOKENS plus these, the M range (up to 512) where the kernel's tile choice steps
FP8_SMALL_M = (2, 8, 24, 40, 48, 80, 96, 112, 160, 192, 224, 320, 384, 448)
FP8_GEMM_DTYPES = ("fp8", "fp8_block")
POWER_LAW_TOKENS = (16, 256, 4096)  # MoE keys also measured under power-law routing at these token counts
# decode attention: sequences per attention rank x cached tokens
DECODE_BATCH = (1, 4, 16, 64, 128, 256, 512)
KV_LENS = (1024, 4096, 16384, 65536)
# prefill attention: (sequences, tokens each), no cached prefix
PREFILL = (
    (1, 128),
    (1, 512),
    (1, 1024),
    (1, 2048),
    (1, 4096),
    (1, 8192),
    (1, 16384),
    (1, 32768),
    (4, 1024),
    (4, 4096),
    (16, 512),
)
DECODE_BYTES_LIMIT = 24 << 30  # KV a decode case may read; larger batches do not fit next to weights anyway
PREFILL_TOKENS_LIMIT = 65536
COMM_BYTES = tuple(1 << p for p in range(10, 31))  # 1 KiB .. 1 GiB per rank
ELEMENTWISE_BYTES = tuple(1 << p for p in range(14, 34, 1))

ATTENTION_TYPES = (AttentionPrefill, AttentionDecode, MlaPrefill, MlaDecode, Dsv4Context, Dsv4Generation)


def default_models() -> list[str]:
    """Every embedded model, then every embedded checkpoint that overrides its model's precision."""
    names = list_models()
    names += [ckpt for ckpt, entry in list_checkpoints().items() if entry.overrides_precision]
    return names


def planning_model(name: str, system):
    """The ModelSpec a system would serve for this name (see the module docstring)."""
    model = load_model(name)
    try:
        check_precision(model, system)
        return model
    except ServelabError:
        pass
    if model.name in FP8_CONVERSIONS:
        return load_model(FP8_CONVERSIONS[model.name], expert_dtype="fp8_block")
    base = load_model(model.name)  # the checkpoint's model at the model's own precision
    try:
        check_precision(base, system)
        return base
    except ServelabError:
        return load_model(name, expert_dtype="bf16")


def parallels(model, max_gpus: int = 8):
    """Every valid Parallel with tp in TPS (<= max_gpus): ep in {1, tp}, dp_attn off and on."""
    out = []
    for tp in TPS:
        if tp > max_gpus:
            continue
        for ep in sorted({1, tp}):
            for dp in (False, True):
                p = Parallel(tp=tp, ep=ep, dp_attn=dp)
                try:
                    p.validate(model)
                except ServelabError:
                    continue
                out.append(p)
    return out


def _decode_bytes(key) -> float:
    if isinstance(key, AttentionDecode):
        return key.batch * key.kv_len * key.kv_heads * key.head_dim * 4
    if isinstance(key, MlaDecode):
        return key.batch * key.kv_len * 1152
    if isinstance(key, Dsv4Generation):
        return key.batch * key.kv_len * 300
    return 0


def model_keys(model, max_gpus: int = 8) -> list[OpKey]:
    """The keys step_ops asks for, for this model, over all parallels and the shape grids (deduplicated)."""
    keys: dict = {}
    for par in parallels(model, max_gpus):
        dp = par.attn_dp
        # GEMM / MoE / elementwise: decode steps whose tokens per attention rank walk TOKENS
        for t in TOKENS:
            for op in step_ops(model, par, StepShape(decode_batch=t * dp, decode_kv_len=KV_LENS[0])):
                if isinstance(op.key, (Gemm, Moe)):
                    keys.setdefault(op.key, None)
                    if isinstance(op.key, Gemm) and op.key.dtype in FP8_GEMM_DTYPES and t == TOKENS[0]:
                        for m in FP8_SMALL_M:  # a GEMM's m at t tokens is t times its m at one token
                            keys.setdefault(op.key._replace(m=m * op.key.m), None)
                    if isinstance(op.key, Moe) and t in POWER_LAW_TOKENS:
                        keys.setdefault(op.key._replace(distribution="power_law"), None)
        # attention: decode batch x kv grid and prefill grid
        shapes = [StepShape(decode_batch=b * dp, decode_kv_len=kv) for b in DECODE_BATCH for kv in KV_LENS]
        shapes += [StepShape(prefill=((s, 0),) * (c * dp)) for c, s in PREFILL]
        for shape in shapes:
            for op in step_ops(model, par, shape):
                if (
                    isinstance(op.key, ATTENTION_TYPES)
                    and op.count > 0
                    and _decode_bytes(op.key) <= DECODE_BYTES_LIMIT
                ):
                    keys.setdefault(op.key, None)
    return list(keys)


def base_keys() -> list[OpKey]:
    """Shapes no embedded model asks for, so tables cover the space between them."""
    keys: list[OpKey] = []
    for n, k in ((4096, 4096), (8192, 8192), (16384, 4096), (4096, 16384), (1024, 1024)):
        for dtype in ("bf16", *FP8_GEMM_DTYPES):
            ms = sorted(TOKENS + FP8_SMALL_M) if dtype in FP8_GEMM_DTYPES else TOKENS
            keys.extend(Gemm(m, n, k, dtype) for m in ms)
    for b in DECODE_BATCH:
        for kv in KV_LENS:
            keys.append(AttentionDecode(b, kv, 32, 8, 128))
    for c, s in PREFILL:
        keys.append(AttentionPrefill(c, s, 32, 8, 128))
    keys.extend(Memory(b) for b in ELEMENTWISE_BYTES)
    return [k for k in keys if _decode_bytes(k) <= DECODE_BYTES_LIMIT]


def comm_keys(gpus: tuple[int, ...]) -> list[Comm]:
    return [
        Comm(b, g, op)
        for g in gpus
        if g > 1
        for op in COMM_OPS
        for b in COMM_BYTES
        if not (op == OpName.p2p and g > 2)
    ]


def plan(
    models: list[str],
    system,
    ops: set[str],
    comm_gpus: tuple[int, ...],
    smoke: bool = False,
    max_gpus: int = 8,
) -> list[OpKey]:
    """All keys of a campaign, in the order they run: model-centric first, interleaved across ops so that a
    campaign cut short still covers every op; then the base grid; collectives last (they need every GPU)."""
    model_centric: dict = {}
    for name in models:
        for key in model_keys(planning_model(name, system), max_gpus):
            if key.op in ops:
                model_centric.setdefault(key, None)
    base = [k for k in base_keys() if k.op in ops and k not in model_centric]
    comm = [k for k in comm_keys(comm_gpus) if k.op in ops]
    if smoke:
        return _smoke(list(model_centric)) + _smoke(base, per_op=2) + _smoke(comm, per_op=2)
    return _interleave(list(model_centric)) + _interleave(base) + comm


def _by_op(keys):
    groups: dict[str, list] = {}
    for k in keys:
        groups.setdefault(k.op, []).append(k)
    return groups


def _interleave(keys):
    groups = [sorted(v, key=_size) for v in _by_op(keys).values()]
    # spread each op's keys so that any prefix samples its whole range (stride through the sorted list)
    spread = [_stride_order(g) for g in groups]
    out = []
    for i in range(max((len(g) for g in spread), default=0)):
        out.extend(g[i] for g in spread if i < len(g))
    return out


def _stride_order(items):
    n = len(items)
    order, step = [], 1
    while step < n:
        step *= 2
    seen = set()
    while step >= 1:
        for i in range(0, n, step):
            if i not in seen:
                seen.add(i)
                order.append(items[i])
        step //= 2
    return order


def _size(key) -> tuple:
    return tuple(v for v in key if isinstance(v, int))


def _smoke(keys, per_op: int = 3):
    """A handful per op: the smallest, a middle and the largest key."""
    out = []
    for group in _by_op(keys).values():
        g = sorted(group, key=lambda k: sum(v for v in k if isinstance(v, int)))
        picks = [g[0], g[len(g) // 2], g[-1]][:per_op] if len(g) >= 3 else g
        for p in picks:
            if p not in out:
                out.append(p)
    return out


def expand_ops(spec: list[str] | None) -> set[str]:
    """--ops values (families or single ops) -> the set of op names."""
    if not spec:
        return set(BENCH)
    out: set[str] = set()
    for item in spec:
        for name in (s.strip() for s in item.split(",") if s.strip()):
            if name in OP_GROUPS:
                out.update(OP_GROUPS[name])
            elif name in BENCH:
                out.add(name)
            else:
                choices = list(OP_GROUPS) + list(BENCH)
                raise ServelabError(
                    f"unknown op {name!r}{closest(name, choices)}; known: {', '.join(choices)}", field="ops"
                )
    return out
