"""The keys engine-kernel entries measure: asked of the predictor (servelab.predict.graph.step_ops) for the
deployments the shipped recipes run, over shape grids, so that a row answers exactly the key a prediction
asks for. The grids stay small: engine campaigns run in minutes of a GPU, not hours.

DeepSeek-V4 (H200 recipes: sgl-project/DeepSeek-V4-Flash-FP8 on 8 GPUs, TP8 + EP8 with and without DP
attention, 8K/1K and 1K/1K, prompts to 1M tokens): the attention modules at the heads one rank holds (TP8: 8
of Flash's 64, 16 of Pro's 128; DP attention: all of them); context rows from 128 to 1,048,576 tokens (the
predictor prices a chunk after `past` cached tokens as F(past + new) - F(past), so long prompts need F at
long lengths), decode batches 1..256 per attention rank at 1K..1M cached tokens (within 24 GiB of KV); MoE
at the EP8 split, tokens 1..16384 per rank's step.
"""

from collections.abc import Callable, Iterable

from servelab.perfdb.keys import Dsv4Context, Dsv4Generation, Gemm, Moe, OpKey
from servelab.predict.graph import StepShape, step_ops
from servelab.specs import Parallel, load_model

# tokens in one step (per attention rank): MoE rows
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
# small M where the shipped DeepSeek-R1 rows interpolate 10-30 % off (docs/accuracy.md): tile steps
SMALL_TOKENS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
# DeepSeek-V4 context (prompts of `seq` tokens, one at a time, and a few batches of short ones)
DSV4_CONTEXT = (
    *(
        (1, s)
        for s in (128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1 << 20)
    ),
    (4, 1024),
    (8, 1024),
    (4, 2048),
)
# DeepSeek-V4 decode: sequences per attention rank x cached tokens (8K/1K ends at 9,216)
DSV4_DECODE_BATCH = (1, 4, 16, 64, 256)
DSV4_DECODE_KV = (1024, 9216, 32768, 131072, 1 << 20)
DSV4_DECODE_KV_BYTES = 24 << 30  # compressed + window cache a decode row may hold (fp8, 584 B an entry)
RECIPE_PARALLELS = (Parallel(tp=8, ep=8), Parallel(tp=8, ep=8, dp_attn=True))
# (model, parallels, longest prompt, most cached tokens): V4-Flash as the H200 recipes run it; V4-Pro (no H200
# recipe) at TP8 only, where its 16 heads per rank differ from Flash's 8, and to 64K / 128K tokens
DSV4_MODELS = (
    ("sgl-project/DeepSeek-V4-Flash-FP8", RECIPE_PARALLELS, 1 << 20, 1 << 20),
    ("sgl-project/DeepSeek-V4-Pro-FP8", RECIPE_PARALLELS[:1], 65536, 131072),
)


def asked(
    models: Iterable[str], parallels: Iterable[Parallel], shapes: Iterable[StepShape], want
) -> list[OpKey]:
    """The keys step_ops asks for, of the types in `want`, for every model x parallel x shape (in order,
    deduplicated)."""
    out: dict[OpKey, None] = {}
    pars = list(parallels)
    shape_list = list(shapes)
    for name in models:
        model = load_model(name)
        for par in pars:
            for shape in shape_list:
                for op in step_ops(model, par, shape):
                    if isinstance(op.key, want) and op.count > 0:
                        out.setdefault(op.key, None)
    return list(out)


def moe_keys(
    models: Iterable[str], parallels: Iterable[Parallel], tokens: Iterable[int], dtype: Callable[[str], bool]
) -> list[OpKey]:
    """MoE keys of decode steps of `tokens` tokens per attention rank, uniform routing."""
    pars = list(parallels)
    out: dict[OpKey, None] = {}
    for t in tokens:
        for par in pars:
            for k in asked(models, [par], [StepShape(decode_batch=t * par.attn_dp)], Moe):
                if isinstance(k, Moe) and dtype(k.dtype):
                    out.setdefault(k, None)
    return list(out)


def gemm_keys(models: Iterable[str], parallels: Iterable[Parallel], tokens: Iterable[int]) -> list[OpKey]:
    """GEMM keys (linear layers) of decode steps of `tokens` tokens per attention rank, every dtype."""
    pars = list(parallels)
    out: dict[OpKey, None] = {}
    for t in tokens:
        for par in pars:
            for k in asked(models, [par], [StepShape(decode_batch=t * par.attn_dp)], Gemm):
                out.setdefault(k, None)
    return list(out)


def dsv4_context_keys() -> list[OpKey]:
    keys = []
    for batch, seq in DSV4_CONTEXT:
        for model, pars, longest, _ in DSV4_MODELS:
            if seq <= longest:
                keys += asked([model], pars, [StepShape(prefill=((seq, 0),) * batch)], Dsv4Context)
    return list(dict.fromkeys(keys))


def dsv4_generation_keys() -> list[OpKey]:
    keys = []
    for kv in DSV4_DECODE_KV:
        for b in DSV4_DECODE_BATCH:
            for model, pars, _, most in DSV4_MODELS:
                for par in pars:
                    if kv > most:
                        continue
                    shape = StepShape(decode_batch=b * par.attn_dp, decode_kv_len=kv)
                    keys += [
                        k
                        for k in asked([model], [par], [shape], Dsv4Generation)
                        if isinstance(k, Dsv4Generation) and dsv4_decode_bytes(k) <= DSV4_DECODE_KV_BYTES
                    ]
    return list(dict.fromkeys(keys))


def dsv4_decode_bytes(key: Dsv4Generation) -> int:
    """The fp8 KV a decode key holds: compressed entries (every 4th / 128th token) and the 128-token window,
    584 B each (448 fp8 + 64 bf16 rope + 8 scale bytes)."""
    ratio = 4 if "_csa_" in key.op else 128
    return key.batch * (key.kv_len // ratio + 128) * 584


# vLLM prefills a prompt in chunks of max_num_batched_tokens (8,192 in the shipped DeepSeek-V4 recipes)
CHUNK = 8192


def dsv4_pieces(key: Dsv4Context) -> list[tuple[int, int, float]]:
    """How a context row is timed: (new tokens, cached tokens before them, weight) per measured chunk, the
    row's latency being the weighted sum. Up to CHUNK tokens: one piece, the whole prompt. Longer: vLLM's
    chunks of CHUNK tokens; with more than three, the first, middle and last are timed and the others
    interpolated linearly in the chunk index (a chunk's cost grows about linearly with what it attends to:
    HCA's compressed entries grow with the prefix, CSA's top-k set saturates once the prefix passes 4 x
    top-k tokens)."""
    if key.seq <= CHUNK:
        return [(key.seq, 0, 1.0)]
    n, rest = divmod(key.seq, CHUNK)
    tail = [(rest, n * CHUNK, 1.0)] if rest else []
    if n <= 3:
        return [(CHUNK, i * CHUNK, 1.0) for i in range(n)] + tail
    last = n - 1
    mid = last // 2
    # the sum over chunk i = 0..last of the piecewise-linear interpolation through (0, f0), (mid, fm),
    # (last, fl): exact where the cost is linear in i on each side of the middle
    w0 = (mid + 1) / 2
    wm = (mid + 1) / 2 + (last - mid - 1) / 2
    wl = (last - mid + 1) / 2
    return [(CHUNK, 0, w0), (CHUNK, mid * CHUNK, wm), (CHUNK, last * CHUNK, wl)] + tail
