"""Memory per GPU: weights, activations, framework reserve, and what is left for the KV cache."""

from functools import lru_cache

from pydantic import BaseModel

from servelab.engines.version import Version, numbered_release
from servelab.engines.vllm.batch import batch_defaults as vllm_batch_defaults
from servelab.engines.vllm.runner import (
    Runner,
    cudagraph_count,
    model_runner,
    subtracts_cudagraph_memory,
)
from servelab.errors import ServelabError
from servelab.readable import typed
from servelab.specs import ModelSpec, Parallel, SystemSpec

GIB = float(1 << 30)
MAX_CONTEXT = 100_000_000  # tokens in one sequence: 100x the longest context any served model has today

# CUDA context, NCCL buffers, CUDA-graph pools and allocator slack; engines' own profiling sees 2-5 GiB a GPU
# (TensorRT-LLM's rule; SGLang's and vLLM's count their own, below)
FRAMEWORK_RESERVE_GIB = 3.0
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # TensorRT-LLM's free_gpu_memory_fraction

# vLLM 0.25.0's KV sizing, read in its wheel (vllm-0.25.0-cp38-abi3-manylinux_2_28_x86_64.whl):
# v1/worker/gpu_worker.py Worker.determine_available_memory gives the KV cache
#   ceil(gpu_memory_utilization x the device's total memory as CUDA reports it) (v1/worker/utils.py
#   request_memory) - weights (the torch memory loading took) - the torch peak of a profile run - the
#   non-torch memory that appeared since the worker's first snapshot (utils/mem_utils.py memory_profiling).
# The snapshot is taken after NCCL is set up, so the CUDA context and NCCL buffers are not subtracted;
# CUDA-graph memory is subtracted only by the V1 model runner (the V2 runner answers 0 in
# profile_cudagraph_memory: it captures graphs after sizing the KV cache); which runner a model gets, by
# release, is engines/vllm/runner.py's.
# Its default share, config/cache.py CacheConfig.gpu_memory_utilization, read in the wheels of each release
# named: 0.9 in 0.16.0, 0.18.0 and 0.19.0; 0.92 from 0.20.0 (0.20.0, 0.21.0, 0.23.0, 0.25.0; the CPU build
# of 0.32.0 too), the release that also turned on CUDA-graph memory profiling
# (envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, "0" in 0.19.0, "1" from 0.20.0)
VLLM_GPU_MEMORY_UTILIZATION = 0.92
VLLM_GPU_MEMORY_UTILIZATION_BEFORE_0_20 = 0.9
# non-torch memory that appears during the profile run (CUDA modules of the kernels it loads, their local
# memory): an estimate of the order of vLLM's own example in utils/mem_utils.py memory_profiling (non-torch
# memory grows by 0.5 GiB over profiling); not measured here
VLLM_NON_TORCH_GIB = 0.5
# CUDA graph memory a graph: the development point's V2 capture of Llama-3.1-8B on the H100
# (tests/data/vllm_gpu server_start.log, "Graph capturing finished in 5 secs, took 0.98 GiB") over the 102
# graphs of its default sizes (51 a mode, FULL and PIECEWISE, assumed: the log does not count them): measured
# once, on another runner and model; an estimate for the V1 runner's (which measures its captures the same
# way, free memory before and after)
VLLM_CUDAGRAPH_MIB_PER_GRAPH = 0.98 * 1024 / 102
VLLM_BLOCK_SIZE = 16  # tokens per KV page (the FlashAttention backend's default); the cache is whole pages

# SGLang's defaults by GPU memory on CUDA GPUs (server_args.py, ServerArgs._handle_gpu_memory_settings, the
# same in 0.5.6 and 0.5.9): (below this many GiB, chunked_prefill_size, cuda_graph_max_bs below tp 4, from 4)
SGLANG_GPU_DEFAULTS = (
    (20, 2048, 8, 8),
    (35, 2048, 24, 80),
    (60, 4096, 32, 160),
    (160, 8192, 256, 512),  # H100 and H200 (its "below 90" and "below 160" bands are the same)
    (None, 16384, 512, 512),
)


class MemoryBreakdown(BaseModel):
    """Per GPU, in GiB. KV capacity is per attention rank (each holds its own sequences under dp_attn)."""

    weights_gib: float
    activations_gib: float
    reserve_gib: float
    kv_gib: float
    total_gib: float  # what the engine may use (weights, activations, reserve and KV cache)
    hbm_gib: float
    fits: bool
    kv_bytes_per_token: float  # per GPU, asymptotic
    max_kv_tokens: int  # per attention rank
    attn_dp: int
    source: str = "model (weights from the spec's parameter counts; activations and reserve estimated)"

    def max_sequences(self, context_len: int, model: ModelSpec, parallel: Parallel) -> int:
        """Sequences of context_len tokens the whole replica holds at once."""
        if not 1 <= context_len <= MAX_CONTEXT:
            raise ServelabError(f"expected 1 to {MAX_CONTEXT:,} tokens, got {context_len:,}", field="context")
        per_seq = kv_bytes_per_sequence_per_gpu(model, parallel, context_len)
        per_rank = int(self.kv_gib * GIB // per_seq) if self.kv_gib > 0 else 0
        return per_rank * self.attn_dp


def weight_bytes_per_gpu(model: ModelSpec, parallel: Parallel) -> float:
    """Attention and dense weights split over attn_tp (replicated across DP-attention ranks), experts over all
    tp GPUs of a stage, embeddings over attn_tp; layers over pp stages."""
    p, prec = model.params, model.precision
    stage = 1.0 / parallel.pp
    mtp_experts = p.mtp_routed_experts
    experts = (p.routed_experts + mtp_experts) * prec.experts.bytes / parallel.tp
    shared_dense = (p.shared_experts + p.dense_ffn) * prec.weights.bytes / parallel.attn_tp
    bf16 = model.unquantized_attention_params  # kept out of the checkpoint's quantization
    attention = (
        (p.attention + p.other + p.router - bf16) * prec.weights.bytes + bf16 * 2.0
    ) / parallel.attn_tp
    mtp_rest = (p.mtp - mtp_experts) * prec.weights.bytes / parallel.attn_tp
    embed = (p.embedding + p.lm_head) * 2.0 / parallel.attn_tp
    return (experts + shared_dense + attention) * stage + mtp_rest + embed


def kv_bytes_per_sequence_per_gpu(model: ModelSpec, parallel: Parallel, context_len: int) -> float:
    layers_share = 1.0 / parallel.pp
    per_rank = model.kv_bytes_per_sequence(context_len, parallel.kv_heads_local(model), parallel.attn_tp)
    return per_rank * layers_share


def _sglang_defaults(gpu_gib: float, parallel: Parallel) -> tuple[int, int]:
    """SGLang's default (chunked_prefill_size, cuda_graph_max_bs) for this GPU and split."""
    band = next(b for b in SGLANG_GPU_DEFAULTS if b[0] is None or gpu_gib < b[0])
    _, chunk, graph_small_tp, graph_large_tp = band
    return chunk, graph_small_tp if parallel.tp < 4 else graph_large_tp


def sglang_cuda_graph_max_bs(gpu_gib: float, parallel: Parallel) -> int:
    """The largest decode batch SGLang captures in a CUDA graph by default (server_args.py,
    ServerArgs._handle_gpu_memory_settings): on an H200, 256 below tp 4 and 512 from tp 4."""
    return _sglang_defaults(gpu_gib, parallel)[1]


def sglang_mem_fraction_static(
    gpu_gib: float, parallel: Parallel, chunked_prefill_size: int | None = None
) -> float:
    """SGLang's default mem_fraction_static (server_args.py, ServerArgs._handle_gpu_memory_settings): the GPU
    less a reserve in MiB for activations (1.5 per token of the chunked-prefill size, at least 2048 tokens),
    CUDA graphs (2 per batch of cuda_graph_max_bs), metadata (512), large parallel sizes (1024 per 8 GPUs of
    tp x pp) and DP attention (3 x cuda_graph_max_bs x dp, 1.5 more above a graph batch of 300), at least
    10 GiB on GPUs above 60 GiB, as a share of the GPU rounded to 3 digits. Speculative decoding's extra
    reserve (2 GiB for EAGLE/MTP) is not included."""
    gpu_mib = gpu_gib * 1024
    default_chunk, graph_bs = _sglang_defaults(gpu_gib, parallel)
    chunk = chunked_prefill_size or default_chunk
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + parallel.tp * parallel.pp / 8 * 1024
    if parallel.dp_attn:
        reserved += graph_bs * parallel.attn_dp * (4.5 if graph_bs > 300 else 3)
    if gpu_gib > 60:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def _widest_intermediate(model: ModelSpec, parallel: Parallel, mlp_widths: int, routed: bool = True) -> int:
    """Values a token holds at a layer's widest point on one GPU: mlp_widths x the MLP's intermediate size
    (the routed experts' x top-k, unless routed is False), or the attention projections (3 x heads x head
    dim)."""
    att, moe = model.attention, model.moe
    return max(
        (model.intermediate_size or 0) * mlp_widths // parallel.attn_tp,
        moe.intermediate_size * mlp_widths * max(moe.experts_per_token, 1) // parallel.moe_tp
        if moe and routed
        else 0,
        att.num_heads * att.q_head_dim * 3 // parallel.attn_tp,
    )


def activation_bytes(model: ModelSpec, parallel: Parallel, max_num_batched_tokens: int) -> float:
    """Peak transient memory of one forward pass at the token budget (bf16 activations, fp32 logits)."""
    tokens = max_num_batched_tokens / parallel.attn_dp
    width = _widest_intermediate(model, parallel, mlp_widths=2)
    per_token = (4 * model.hidden_size * model.residual_streams + width) * 2
    logits = min(tokens, 256) * model.vocab_size / parallel.attn_tp * 4
    return tokens * per_token + logits


def vllm_gpu_memory_utilization(version: str | None) -> float:
    """vLLM's default gpu_memory_utilization for a release (an image tag or version string): 0.9 before
    0.20.0, 0.92 from it; a release not named by number (None, latest, a nightly) takes the newest, as
    engines.vllm.batch does."""
    release = numbered_release(version)
    if release is None or release >= Version("0.20.0"):
        return VLLM_GPU_MEMORY_UTILIZATION
    return VLLM_GPU_MEMORY_UTILIZATION_BEFORE_0_20


def vllm_moe_workspace_bytes(model: ModelSpec, parallel: Parallel, max_num_batched_tokens: int) -> float:
    """The fused-MoE workspace at the profile run's token budget, bf16 (0.25.0,
    model_executor/layers/fused_moe/modular_kernel.py FusedMoEKernel._allocate_buffers with
    experts/triton_moe.py TritonExperts.workspace_shapes, the experts vLLM runs for bf16 weights on Hopper):
    workspace13 of tokens x top-k x max(N / 2, K), shared with the output, and workspace2 of
    tokens x top-k x max(N, K), N the gate-up width on this GPU (2 x the experts' intermediate / moe_tp), K
    the hidden size. One buffer a process (v1/worker/workspace.py WorkspaceManager), grown to the largest step
    and kept, so it is still held when the sampler runs. 0 for a model without routed experts. Other expert
    backends (DeepGEMM, CUTLASS, FlashInfer) size theirs differently: taken the same here, an estimate."""
    moe = model.moe
    if moe is None or moe.experts_per_token < 1:
        return 0.0
    tokens = max_num_batched_tokens / parallel.attn_dp
    gate_up = 2 * moe.intermediate_size // parallel.moe_tp
    hidden = model.hidden_size
    return tokens * moe.experts_per_token * (max(gate_up // 2, hidden) + max(gate_up, hidden)) * 2


def vllm_sampler_bytes_per_logit(runner: Runner) -> int:
    """Bytes the profile run's sampler holds a logit of each row. V2 (v1/worker/gpu/sample/sampler.py
    apply_sampling_params): the logits in bf16 and their fp32 copy, 6. V1 (v1/worker/gpu_model_runner.py
    _dummy_sampler_run, 0.25.0: its second call, with a generator, takes v1/sample/ops/topk_topp_sampler.py
    forward_native): the bf16 logits, their fp32 copy (v1/sample/sampler.py Sampler.forward; temperature and
    top-k/top-p are applied in place, apply_top_k_top_p_triton from 8 rows), the fp32 softmax and
    random_sample's fp32 exponential noise of the same shape, 14."""
    return 14 if runner == "v1" else 6


def vllm_profile_peak_bytes(
    model: ModelSpec,
    parallel: Parallel,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    runner: Runner = "v2",
    sm_count: int = 0,
) -> float:
    """The torch peak of vLLM's profile run above what was allocated before it (0.25.0: V2
    v1/worker/gpu/model_runner.py GPUModelRunner.profile_run, V1 v1/worker/gpu_model_runner.py
    GPUModelRunner.profile_run and _dummy_run): one dummy forward of max_num_batched_tokens tokens over
    min(tokens, max_num_seqs) requests with attention skipped, then the sampler on one row per request.
    The forward peaks inside a layer: the residual and the normed input (hidden x residual streams each)
    beside the widest intermediate, the dense MLP's gate-up output and its activation (3 x intermediate) or
    the attention projections; all bf16. Routed experts hold the fused-MoE workspace instead
    (vllm_moe_workspace_bytes), which stays allocated under the sampler too. The sampler holds the forward's
    hidden states and its rows' logits (vllm_sampler_bytes_per_logit); V1 also a random copy of the rows'
    hidden states and top-k/top-p's fp32 buffer of min(SMs, rows) rows (v1/sample/ops/topk_topp_triton.py
    apply_top_k_top_p_triton, kept between calls). The peak is the workspace plus the larger of the two."""
    tokens = max_num_batched_tokens / parallel.attn_dp
    workspace = vllm_moe_workspace_bytes(model, parallel, max_num_batched_tokens)
    width = _widest_intermediate(model, parallel, mlp_widths=3, routed=not workspace)
    hidden = model.hidden_size * model.residual_streams * 2  # bytes a token, bf16
    forward = tokens * (2 * hidden + width * 2)
    rows = min(tokens, max_num_seqs)
    sampler = tokens * hidden + rows * model.vocab_size * vllm_sampler_bytes_per_logit(runner)
    if runner == "v1":
        sampler += rows * hidden + min(sm_count, rows) * model.vocab_size * 4
    return workspace + max(forward, sampler)


def vllm_cudagraph_bytes(
    max_num_seqs: int, max_num_batched_tokens: int, max_capture_size: int | None = None
) -> float:
    """The V1 runner's CUDA graph estimate (v1/worker/gpu_model_runner.py profile_cudagraph_memory, 0.25.0):
    it captures each mode's two largest sizes and takes the first capture plus (graphs - 1) x the second,
    per mode, for the graphs engines/vllm/runner.py cudagraph_count gives (the default FULL_AND_PIECEWISE;
    max_capture_size: the launch's max_cudagraph_capture_size, None: vLLM's rule from max_num_seqs). Its
    per-graph memory is the driver's and is not in the source: estimated here as VLLM_CUDAGRAPH_MIB_PER_GRAPH
    a graph (see there)."""
    graphs = cudagraph_count(max_num_seqs, max_num_batched_tokens, max_capture_size)
    return graphs * VLLM_CUDAGRAPH_MIB_PER_GRAPH * (1 << 20)


@lru_cache(maxsize=4096)
def memory_per_gpu(
    model: ModelSpec,
    system: SystemSpec,
    parallel: Parallel,
    max_num_batched_tokens: int = 8192,
    gpu_memory_utilization: float | None = None,
    fraction_of_free: bool = False,
    static_fraction: bool = False,
    vllm_version: str | None = None,
    max_num_seqs: int | None = None,
    max_cudagraph_capture_size: int | None = None,
) -> MemoryBreakdown:
    """gpu_memory_utilization is the share of the whole GPU the engine fills (vLLM's gpu-memory-utilization),
    or with fraction_of_free the share of what the weights, activations and reserve leave that goes to the
    KV cache (TensorRT-LLM's free_gpu_memory_fraction: it loads the weights, profiles a forward pass at
    max_num_tokens, then allocates that share of the free memory); None: 0.9.

    static_fraction: SGLang's rule. Its mem_fraction_static (gpu_memory_utilization; None: SGLang's default
    for this GPU, split and chunked-prefill size) is the share of the GPU for weights and KV cache, the rest
    for activations and CUDA graphs: ModelRunner.profile_max_num_token sizes the token pool as the free memory
    after loading the weights less (1 - mem_fraction_static) x the memory free at start, so the KV cache is
    mem_fraction_static x GPU - weights (the CUDA context, under 1 GiB, is not subtracted from the GPU).

    vllm_version: the vLLM release whose model runner (engines/vllm/runner.py) sizes the cache; None: the
    newest read (0.25.0). It does not choose the default share: callers pass vllm_gpu_memory_utilization.
    max_num_seqs: the server's sequence cap, which sizes vLLM's profile run (its sampler runs one row per
    request) and the CUDA graphs it subtracts (None: vLLM's default for the GPU, engines/vllm/batch.py);
    max_cudagraph_capture_size: the server's largest graph size (None: vLLM's rule, 2 x max_num_seqs up to
    512). Both are read for vLLM's rule only."""
    if gpu_memory_utilization is None:
        if static_fraction:
            gpu_memory_utilization = sglang_mem_fraction_static(
                system.hbm_gib, parallel, max_num_batched_tokens
            )
        elif fraction_of_free:
            gpu_memory_utilization = DEFAULT_GPU_MEMORY_UTILIZATION
        else:
            gpu_memory_utilization = VLLM_GPU_MEMORY_UTILIZATION
    if not 0 < gpu_memory_utilization <= 1:  # NaN fails this too
        raise ServelabError(
            f"must be in (0, 1], got {gpu_memory_utilization}", field="gpu_memory_utilization"
        )
    if max_num_batched_tokens < 1:
        raise ServelabError(
            f"expected a positive number of tokens, got {max_num_batched_tokens}",
            field="max_num_batched_tokens",
        )
    weights = weight_bytes_per_gpu(model, parallel) / GIB
    acts = activation_bytes(model, parallel, max_num_batched_tokens) / GIB
    reserve = FRAMEWORK_RESERVE_GIB
    note, page_tokens = "", 1
    if static_fraction:
        kv = gpu_memory_utilization * system.hbm_gib - weights
        total = system.hbm_gib  # the reserve is what the static share leaves beside the activations
        reserve = max(0.0, (1.0 - gpu_memory_utilization) * system.hbm_gib - acts)
        note = (
            f"; KV cache = mem_fraction_static {typed(gpu_memory_utilization)} x the GPU - weights (SGLang)"
        )
    elif fraction_of_free:
        kv = gpu_memory_utilization * (system.hbm_gib - weights - acts - FRAMEWORK_RESERVE_GIB)
        total = weights + acts + FRAMEWORK_RESERVE_GIB + kv if kv > 0 else system.hbm_gib
    else:  # vLLM's rule (VLLM_GPU_MEMORY_UTILIZATION says where it was read)
        device_gib, device_how = system.ceiling("cuda_memory_gib", system.hbm_gib)
        if max_num_seqs is None:
            max_num_seqs = vllm_batch_defaults(device_gib, system.gpu_name).max_num_seqs
        if max_num_seqs < 1:
            raise ServelabError(
                f"expected a positive number of sequences, got {max_num_seqs}", field="max_num_seqs"
            )
        rows = min(max_num_seqs, max_num_batched_tokens)
        runner = model_runner(model, vllm_version)
        peak = vllm_profile_peak_bytes(model, parallel, max_num_batched_tokens, rows, runner, system.sm_count)
        acts = peak / GIB
        graphs = 0.0
        if subtracts_cudagraph_memory(model, vllm_version):
            graphs = (
                vllm_cudagraph_bytes(max_num_seqs, max_num_batched_tokens, max_cudagraph_capture_size) / GIB
            )
        reserve = VLLM_NON_TORCH_GIB + graphs
        total = device_gib * gpu_memory_utilization
        kv = total - weights - acts - reserve
        page_tokens = VLLM_BLOCK_SIZE if model.attention.kv_grows_linearly else 1
        runner_file = "v1/worker/gpu_model_runner.py" if runner == "v1" else "v1/worker/gpu/model_runner.py"
        moe_note = " with the fused-MoE workspace" if vllm_moe_workspace_bytes(model, parallel, 1) else ""
        count = cudagraph_count(max_num_seqs, max_num_batched_tokens, max_cudagraph_capture_size)
        graph_note = (
            f" - {typed(graphs)} GiB of CUDA graphs ({count} graphs at {max_num_seqs:,} sequences, "
            f"{VLLM_CUDAGRAPH_MIB_PER_GRAPH:.1f} MiB a graph, "
            "estimated from the development point's capture; profile_cudagraph_memory)"
            if graphs
            else ""
        )
        note = (
            f"; KV cache = gpu_memory_utilization {typed(gpu_memory_utilization)} x {typed(device_gib)} GiB "
            f"(the GPU as CUDA reports it: {device_how}) - weights - the profile run's activation peak at "
            f"{max_num_batched_tokens:,} tokens over {rows:,} requests{moe_note} (estimated from its "
            f"buffers; the {runner.upper()} model runner, {runner_file} profile_run) - "
            f"{VLLM_NON_TORCH_GIB} GiB non-torch (estimated){graph_note}, in whole {VLLM_BLOCK_SIZE}-token "
            "pages (vLLM 0.25.0, v1/worker/gpu_worker.py determine_available_memory)"
        )
    per_token = model.kv_bytes_per_token_asymptotic(parallel.kv_heads_local(model)) / parallel.pp
    max_tokens = _max_tokens(model, parallel, kv * GIB) if kv > 0 else 0
    max_tokens -= max_tokens % page_tokens
    source = MemoryBreakdown.model_fields["source"].default + note
    return MemoryBreakdown(
        weights_gib=weights,
        activations_gib=acts,
        reserve_gib=reserve,
        kv_gib=kv,
        total_gib=total,
        hbm_gib=system.hbm_gib,
        fits=kv > 0,
        kv_bytes_per_token=per_token,
        max_kv_tokens=max_tokens,
        attn_dp=parallel.attn_dp,
        source=source,
    )


def _max_tokens(model: ModelSpec, parallel: Parallel, kv_bytes: float) -> int:
    """Tokens of KV one attention rank holds: for window/compressed caches, tokens of one long sequence."""
    if model.attention.kv_grows_linearly:
        return int(kv_bytes // kv_bytes_per_sequence_per_gpu(model, parallel, 1))
    lo, hi = 0, 1 << 34
    while lo < hi:  # largest S whose single-sequence KV fits
        mid = (lo + hi + 1) // 2
        if kv_bytes_per_sequence_per_gpu(model, parallel, mid) <= kv_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_fits(model: ModelSpec, system: SystemSpec, parallel: Parallel, **kwargs) -> MemoryBreakdown:
    mem = memory_per_gpu(model, system, parallel, **kwargs)
    if not mem.fits:
        need = mem.weights_gib + mem.activations_gib + mem.reserve_gib
        raise ServelabError(
            f"{model.name} on {parallel.gpus}x {system.name} ({parallel.label()}) does not fit: "
            f"{need:.1f} GiB per GPU before any KV cache ({mem.weights_gib:.1f} weights) > "
            f"{mem.total_gib:.1f} GiB usable; use more GPUs, a larger tp/ep, or a smaller weight dtype"
        )
    return mem


__all__ = [
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "GIB",
    "VLLM_GPU_MEMORY_UTILIZATION",
    "MemoryBreakdown",
    "check_fits",
    "kv_bytes_per_sequence_per_gpu",
    "memory_per_gpu",
    "sglang_cuda_graph_max_bs",
    "sglang_mem_fraction_static",
    "vllm_cudagraph_bytes",
    "vllm_gpu_memory_utilization",
    "vllm_moe_workspace_bytes",
    "vllm_profile_peak_bytes",
    "weight_bytes_per_gpu",
]
