"""Roofline op latency: max(compute time, memory time) with efficiencies per op kind, dtype and system.

Used wherever the perf tables have no data. Its error band is wide on purpose: a roofline is a lower bound
that real kernels miss by shape-dependent amounts (tile quantization, launch tails), which the tables capture.
For an engine backend, an all-reduce inside an NVLink domain is priced as the engines run it (peer-memory
one-shot / two-shot kernels, PEER_BARRIER_US); for torch, as NCCL's ring, which the torch tables measure.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from servelab.engines import MODELLED
from servelab.errors import ServelabError
from servelab.perfdb.efficiencies import Efficiencies, efficiencies, fit_for
from servelab.perfdb.keys import (
    DSV4_TOPK,
    AttentionDecode,
    AttentionPrefill,
    Comm,
    DsaDecode,
    DsaIndexer,
    DsaPrefill,
    Dsv4Context,
    Dsv4Generation,
    GdnDecode,
    GdnPrefill,
    Gemm,
    Memory,
    MlaDecode,
    MlaPrefill,
    Moe,
    OpKey,
)
from servelab.perfdb.latency import OpLatency
from servelab.perfdb.ops import COMM_OPS, DSV4_CONTEXT_OPS, DSV4_CSA_OPS, DSV4_GENERATION_OPS, OpName
from servelab.registry import Registry
from servelab.specs import SystemSpec
from servelab.specs.attention import DSV4_INDEXER_ENTRY, DSV4_MAIN_ENTRY_FP8, MlaFp8KvLayout
from servelab.specs.dtypes import Dtype

if TYPE_CHECKING:  # numpy imported when first used (servelab.lazy_numpy says why)
    import numpy as np
else:
    from servelab.lazy_numpy import np

DSV4_HEAD_DIM = 512
DSV4_WINDOW = 128
INDEXER_HEADS, INDEXER_DIM = 64, 128
# The lightning indexer's prefill, as vLLM runs it (model_executor/layers/sparse_attn_indexer.py, v0.25 and
# v0.32): DeepGEMM's fp8_mqa_logits writes one fp32 logit per (query, visible compressed entry) to HBM, in
# row blocks of at most VLLM_SPARSE_INDEXER_MAX_LOGITS_MB (512 MB), and top_k_per_row_prefill reads them back.
LOGIT_BYTES = 4
# Per logit the kernel's epilogue runs, for each indexer head, a ReLU (fmaxf) and a multiply-add with the
# head's weight on the CUDA cores, not the tensor cores (DeepGEMM sm90_fp8_mqa_logits.cuh and
# sm100_mqa_logits.cuh: `fmaxf(accum, 0) * weight` summed over the heads).
EPILOGUE_INSTRUCTIONS_PER_HEAD = 2
# FP32 instruction rate per SM clock on Hopper and Blackwell (128 FP32 lanes per SM); at a 1.98 GHz boost
# clock this is the datasheet FP32 rate (H200: 132 SMs x 128 x 2 flops x 1.98 GHz = 67 TFLOPS).
FP32_LANES_PER_SM, SM_CLOCK_HZ = 128, 1.98e9
# The sparse attention kernels the engines run DeepSeek-V4 with on Hopper and Blackwell (FlashMLA's, and
# FlashInfer's DSV4 backend) take 64 or 128 query heads: a rank with fewer pads its queries with empty heads,
# which the kernel computes like the others (vLLM models/deepseek_v4/nvidia/flashmla.py and
# flashinfer_sparse.py, get_padded_num_q_heads, v0.25 and v0.32; SGLang 0.5.9 pads DeepSeek-V3.2's the same
# way, layers/attention/nsa_backend.py). So tensor parallelism splits the attention core only down to 64 heads
# per rank (V4-Flash at TP8: 8 heads, run as 64); the projections around it split as usual. The op keys keep
# the rank's heads: a table measured with such a kernel has the padding in its times.
DSV4_KERNEL_HEADS = (64, 128)
# DeepSeek's sparse attention (DSA: GLM-5, DeepSeek-V3.2) as SGLang 0.5.10 runs it (the nearest release to the
# GLM-5 rows' nightly images of 2026-03-17 to 04-01). Prefill is dense multi-head attention (MHA_ONE_SHOT)
# while the batch's longest sequence is within index_topk, on Hopper; GLM-5 on Blackwell always runs the
# sparse kernels (server_args.py _handle_model_specific_adjustments sets the threshold to 0 for
# GlmMoeDsaForCausalLM; layers/attention/nsa_backend.py set_nsa_prefill_impl). Sparse attention is MLA
# absorbed over the 512 latent + 64 rope dims (QK) and the 512 latent (V).
DSA_QK_DIM, DSA_V_DIM = 512 + 64, 512
# FlashMLA's sparse prefill kernel takes 64 query heads on Hopper and 128 on Blackwell, and SGLang pads a
# rank's heads up to that (nsa_backend.py _forward_flashmla_sparse); it is SGLang's sparse prefill on Hopper
# and on Blackwell with a BF16 cache. With an FP8 cache on Blackwell SGLang runs TensorRT-LLM's sparse MLA
# kernel (nsa_backend.py _forward_trtllm, the default backends of _set_default_nsa_backends), unpadded.
DSA_SPARSE_PREFILL_HEADS = {90: 64, 100: 128}
# Gated DeltaNet (Qwen3.5, Qwen3-Next) as SGLang 0.5.10 runs it (layers/attention/linear/gdn_backend.py):
# prefill runs the causal conv1d (causal_conv1d_fn) and FLA's chunked gated delta rule
# (layers/attention/fla/chunk.py, CHUNK_SIZE 64: cumsum, K K^T, the triangular solve, the WY recompute, the
# chunk-to-chunk state pass chunk_delta_h.py and the outputs chunk_o.py, plus the q and k L2 norms), the
# matmuls on the tensor cores in bf16, the state of every chunk written once and read back in bf16; decode
# runs causal_conv1d_update and one fused recurrent update (fused_sigmoid_gating_recurrent.py) on the CUDA
# cores, reading and writing each sequence's state once.
GDN_CHUNK = 64
GDN_PREFILL_KERNELS, GDN_DECODE_KERNELS = 9, 2
COMM_LATENCY_US = {
    2: 16.0,
    4: 22.0,
    8: 30.0,
}  # NCCL's small-message floor inside a CUDA graph (2-GPU measured, rest scaled)
BUS_EFFICIENCY = 0.73  # measured 2-GPU all_reduce reached 327 of 450 GB/s
# The engines' all-reduce inside an NVLink domain is not NCCL's ring. vLLM (custom_all_reduce.py and
# symm_mem.py under vllm/distributed/device_communicators), SGLang (its custom all-reduce) and TensorRT-LLM
# (AllReduce with ONESHOT / TWOSHOT strategies, from memory: its source was not available) write into
# peer-mapped buffers and synchronise with flags. One-shot: one barrier, then every rank reads the n - 1 peer
# copies and sums them; two-shot: a reduce-scatter and an all-gather through peer memory, two barriers and the
# ring's volume; the engines take the cheaper. A barrier with its kernel costs about 8 us on Hopper (custom
# all-reduce at decode sizes, where NCCL's floor, measured on the H200 in comm.parquet, is 13-20 us on 2-4
# GPUs). Priced with NCCL's floor, dense Llama-3.1-70B decode on the H200 calibration rows came out slower the
# wider the TP (measured / predicted TPOT, TensorRT-LLM, median: 0.98, 0.85, 0.80, 0.77 at tp 1, 2, 4, 8;
# 0.98, 0.92, 0.93, 0.98 with this rule).
PEER_BARRIER_US = 8.0
PEER_ALLREDUCE_BACKENDS = frozenset(e.value for e in MODELLED)  # every priced engine, not torch
# vLLM never multiplies MXFP4 experts at the FP4 tensor-core rate on an NVIDIA GPU: every backend it has for
# them takes BF16 or MXFP8 activations (fused_moe/oracle/mxfp4.py of 0.25.0, `Mxfp4MoeBackend`: the
# FLASHINFER_TRTLLM and FLASHINFER_CUTLASS MXFP4_BF16 / MXFP4_MXFP8 kernels on SM100, Marlin W4A16 on SM90;
# FP4 x FP4 is AITER's, on ROCm). The roofline takes the faster, MXFP8's FP8 rate, which InferenceX's vLLM
# gpt-oss B200 recipes choose (VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 in single_node/gptoss_fp4_b200.sh);
# vLLM 0.25's default for gpt-oss, MXFP4_BF16, multiplies at half that rate
MXFP4_EXPERTS_COMPUTE = {"vllm": Dtype.fp8.compute}
# The engines' INT4 weight-only MoE kernels (Kimi-K2's W4A16 experts) read the weights well below the HBM
# rate the roofline's fitted memory efficiency assumes. vLLM runs them through Marlin (moe_wna16_marlin_gemm:
# CompressedTensorsWNA16MarlinMoEMethod in 0.15.1 and 0.16, fused_moe/oracle/int_wna16.py in 0.25), and
# SGLang 0.5.10 too (CompressedTensorsWNA16MoE), except FlashInfer's TensorRT-LLM MXINT4 kernel on
# Blackwell where asked for (vLLM 0.16 on with VLLM_USE_FLASHINFER_MOE_INT4=1, which InferenceX's B200
# script sets, while 0.15.1 has no such backend; SGLang's flashinfer_trtllm runner). The fraction of HBM
# peak each GPU's kernels reach, fitted (latency = floor + weight bytes / (fraction x peak)) to
# AIConfigurator's measured tables of Kimi-K2.5's experts at TP8, 1-32 tokens (accuracy/int4_moe_vs_aic.py;
# docs/accuracy.md, twentieth session): vLLM's Marlin 0.831 (0.14.0) and 0.788 (0.24.0) on H100, 0.654
# and 0.617 on H200; on B200 vLLM 0.24's Marlin 0.447 and FlashInfer's MXINT4 (SGLang 0.5.14) 0.480. Each
# is the mean of its GPU's two. About 2.7, 3.1 and 3.5 TB/s: the kernels are bound by their small
# per-expert tiles, not by the HBM, so the fraction falls as the HBM gets faster.
INT4_EXPERTS_HBM_FRACTION = {"h100_sxm": 0.81, "h200_sxm": 0.64, "b200_sxm": 0.46}
INT4_EXPERTS_BACKENDS = frozenset({"vllm", "sglang"})
MEMO_ENTRIES = 1 << 16  # answers a Roofline keeps (a plan asks for ~20,000 keys); all dropped beyond


def fp32_peak_tflops(system: SystemSpec) -> float:
    """The single-precision rate on the CUDA cores (no tensor cores), TFLOPS: the spec's `fp32` figure where
    it has one, else its SMs x FP32_LANES_PER_SM x 2 flops x SM_CLOCK_HZ (the NVIDIA datasheets' rule: 67 on
    an H100 or H200, 75 on a B200; an AMD CU's 128 lanes run at other clocks, so there it is approximate)."""
    return system.peak_tflops.get("fp32") or system.sm_count * FP32_LANES_PER_SM * 2 * SM_CLOCK_HZ / 1e12


def dsv4_kernel_heads(heads: int) -> int:
    """The query heads a DeepSeek-V4 attention kernel computes for `heads` heads on a rank."""
    return next((h for h in DSV4_KERNEL_HEADS if heads <= h), heads)


def _mla_entry_bytes(kv_dtype: str) -> int:
    """One token's MLA cache entry (512 latent + 64 rope): an FP8 cache read as FlashMLA's layout (the model
    default; SGLang's DSA cache, nsa_kv_cache_store_fp8), else BF16."""
    return MlaFp8KvLayout.flashmla.entry_bytes(512, 64) if _dtype_bytes(kv_dtype) < 2 else 1152


@cache  # a handful of dtype names, asked for every key priced: the enum lookup once per name
def _dtype_bytes(name: str) -> float:
    try:
        return Dtype(name).bytes
    except ValueError:
        return 2.0


@cache
def _compute_class(name: str) -> str:
    try:
        return Dtype(name).compute
    except ValueError:
        return "bf16"


@dataclass(slots=True)  # not frozen: a frozen one takes three times as long to make, once a key priced
class Work:
    """What a GEMM, attention or elementwise term prices, apart from the efficiencies: `flops` at the peak of
    the `compute` class times its `kind`'s efficiency (gemm or attention) times `tile_eff`, `bytes` at the
    HBM bandwidth, and `kernels` launches. The roofline fit (calibrate/roofline.py) prices one row's work
    under hundreds of trial efficiencies."""

    flops: float
    bytes: float
    compute: str = "bf16"
    kind: str = "gemm"
    tile_eff: float = 1.0
    kernels: int = 1


class WorkArrays:
    """Many terms' work as arrays (`Roofline.priced_all` prices them at once)."""

    def __init__(self, works: list[Work]):
        self.flops = np.array([w.flops for w in works], dtype=float)
        self.bytes = np.array([w.bytes for w in works], dtype=float)
        self.tile_eff = np.array([w.tile_eff for w in works], dtype=float)
        self.kernels = np.array([w.kernels for w in works], dtype=float)
        self.rates = sorted({(w.compute, w.kind) for w in works})  # the distinct flops rates
        self.rate_of = np.array([self.rates.index((w.compute, w.kind)) for w in works], dtype=int)


class Roofline:
    """Roofline latencies for one system: with the efficiencies fitted for it (else the defaults; when fitted,
    its spec's own `efficiencies` over them), and with 128-wide tile quantization of GEMMs (a partial tile
    costs a whole one) unless those say "tile_quantized": false; the backend decides the all-reduce algorithm
    (PEER_ALLREDUCE_BACKENDS: the engines' peer-memory kernels, else NCCL's ring)."""

    tile_quantized = True

    def __init__(
        self,
        system: SystemSpec,
        fitted: bool = True,
        backend: str = "torch",
        efficiencies_of: Efficiencies | None = None,
    ):
        """efficiencies_of: another system's efficiencies instead of this one's (a transfer's target priced
        as its source's kernels would run on its datasheet)."""
        self.system = system
        self.peer_allreduce = backend in PEER_ALLREDUCE_BACKENDS
        self.mxfp4_experts_compute = MXFP4_EXPERTS_COMPUTE.get(backend)
        int4_fraction = (
            INT4_EXPERTS_HBM_FRACTION.get(system.name) if backend in INT4_EXPERTS_BACKENDS else None
        )
        self.int4_experts_bw = system.hbm_bw_tbs * 1e12 * int4_fraction if int4_fraction else None
        where = f"system {system.name}: efficiencies"
        self.note = f"roofline on {system.name}"
        if efficiencies_of is not None:
            eff = efficiencies_of
        elif fitted:
            fit = fit_for(system)
            eff = efficiencies(fit).over(system.efficiencies, where)
            if fit != system.name:
                self.note += f" with {fit}'s fitted efficiencies"
        else:
            eff = efficiencies("")
        self.eff = eff
        self.tile_quantized = self.tile_quantized and eff.tile_quantized
        self.bw = system.hbm_bw_tbs * 1e12 * eff.memory
        self.kernel_us = eff.kernel_us
        self.band = (eff.band_low, eff.band_high)
        # bound methods, so a subclass's override of a term is the one called
        terms: dict[str, Callable[[Any], float]] = {
            OpName.gemm: self._gemm,
            OpName.attention_prefill: self._attention_prefill,
            OpName.attention_decode: self._attention_decode,
            OpName.mla_prefill: self._mla_prefill,
            OpName.mla_decode: self._mla_decode,
            OpName.dsa_prefill: self._dsa_prefill,
            OpName.dsa_decode: self._dsa_decode,
            OpName.dsa_indexer: self._dsa_indexer,
            OpName.gdn_prefill: self._gdn_prefill,
            OpName.gdn_decode: self._gdn_decode,
            **{op: self._dsv4_context for op in DSV4_CONTEXT_OPS},
            **{op: self._dsv4_generation for op in DSV4_GENERATION_OPS},
            OpName.moe: self._moe,
            **{op: self._comm for op in COMM_OPS},
            OpName.elementwise: self._elementwise,
        }
        self.terms: Registry[Callable[[Any], float]] = Registry("op", terms)
        self._works: dict[str, Callable[[Any], Work]] = {
            OpName.gemm: self._gemm_work,
            OpName.attention_prefill: self._attention_prefill_work,
            OpName.attention_decode: self._attention_decode_work,
            OpName.elementwise: self._elementwise_work,
        }
        self._terms = terms  # read first: the registry is asked only for an op it cannot find (its error)
        # answers by key: the perf tables ask for the same key's roofline many times (notes, fallbacks,
        # transfer ratios, interpolation references); so set any attribute before the first query
        self._answers: dict[OpKey, OpLatency] = {}

    def _flops_rate(self, compute: str, kind: str = "gemm") -> float:
        if compute == Dtype.fp32.compute:
            peak = fp32_peak_tflops(self.system)
        else:
            peak = self.system.peak_tflops.get(compute) or self.system.peak_tflops["bf16"]
        eff = self.eff.gemm_compute.get(compute, 0.6) if kind == "gemm" else self.eff.attention_compute
        return peak * 1e12 * eff

    def _time(self, flops: float, bytes_: float, rate: float, kernels: int = 1) -> float:
        return max(flops / rate, bytes_ / self.bw) * 1e6 + self.kernel_us * kernels

    def _priced(self, w: Work) -> float:
        return self._time(w.flops, w.bytes, self._flops_rate(w.compute, w.kind) * w.tile_eff, w.kernels)

    def priced_all(self, works: WorkArrays) -> list[float]:
        """Each term's time, us: `_priced` on arrays, the same operations in the same order (so the same
        floats: numpy's elementwise + - * / and maximum round as Python's do)."""
        rates = np.array([self._flops_rate(c, kind) for c, kind in works.rates], dtype=float)
        rate = rates[works.rate_of] * works.tile_eff
        us = np.maximum(works.flops / rate, works.bytes / self.bw) * 1e6 + self.kernel_us * works.kernels
        return us.tolist()

    def work(self, key: OpKey) -> Work:
        """A GEMM, attention or elementwise key's work (its latency is `_priced` of it, for this class's
        terms); ServelabError for another op."""
        split = self._works.get(key.op)
        if split is None:
            raise ServelabError(f"op {key.op}: the roofline splits only {', '.join(self._works)} into work")
        return split(key)

    def latency(self, key: OpKey) -> OpLatency:
        hit = self._answers.get(key)
        if hit is None:
            if len(self._answers) >= MEMO_ENTRIES:
                self._answers.clear()
            term = self._terms.get(key.op)
            us = (term if term is not None else self.terms.get(key.op))(key)
            low, high = self.band
            note = self.note
            if key.op == OpName.gemm and _compute_class(getattr(key, "dtype", "")) == Dtype.fp32.compute:
                peak = fp32_peak_tflops(self.system)
                note += f", float32 on the CUDA cores at {peak:.0f} TFLOPS (no tensor cores)"
            hit = OpLatency(us, us * low, us * high, "roofline", note)
            self._answers[key] = hit
        return hit

    # ---- per op kind -------------------------------------------------------------------------------------
    def _gemm(self, k: Gemm) -> float:
        return self._priced(self._gemm_work(k))

    def _gemm_work(self, k: Gemm) -> Work:
        wb = _dtype_bytes(k.dtype)
        compute = _compute_class(k.dtype)
        # a float32 GEMM reads its input cast to float32 and writes float32 (vLLM's float32 router gates)
        act = 1.0 if compute == "fp8" else wb if compute == Dtype.fp32.compute else 2.0
        out = wb if compute == Dtype.fp32.compute else 2.0
        flops = 2.0 * k.m * k.n * k.k
        # tile quantization: Hopper GEMMs run in 128-wide tiles, a partial tile costs a whole one
        tiles = math.ceil(k.m / 128) * 128 * math.ceil(k.n / 128) * 128
        tile_eff = max(k.m * k.n / tiles, 1 / 16) if self.tile_quantized else 1.0
        bytes_ = k.n * k.k * wb + k.m * k.k * act + k.m * k.n * out
        return Work(flops, bytes_, compute, "gemm", tile_eff)

    def _attention_prefill(self, k: AttentionPrefill) -> float:
        return self._priced(self._attention_prefill_work(k))

    def _attention_prefill_work(self, k: AttentionPrefill) -> Work:
        keys = min(k.seq, k.window) if k.window else (k.seq + 1) / 2
        flops = 4.0 * k.batch * k.heads * k.seq * keys * k.head_dim
        bytes_ = k.batch * k.seq * (2 * k.heads + 2 * k.kv_heads) * k.head_dim * 2
        return Work(flops, bytes_, "bf16", "attention")

    def _attention_decode(self, k: AttentionDecode) -> float:
        return self._priced(self._attention_decode_work(k))

    def _attention_decode_work(self, k: AttentionDecode) -> Work:
        kv = min(k.kv_len, k.window) if k.window else k.kv_len
        flops = 4.0 * k.batch * k.heads * kv * k.head_dim
        bytes_ = k.batch * kv * 2 * k.kv_heads * k.head_dim * _dtype_bytes(k.kv_dtype)
        return Work(flops, bytes_, "bf16", "attention")

    def _mla_prefill(self, k: MlaPrefill) -> float:
        flops = 2.0 * k.batch * k.heads * k.seq * (k.seq + 1) / 2 * (192 + 128)
        bytes_ = k.batch * k.seq * k.heads * (192 * 2 + 128 * 2) * 2
        return self._time(flops, bytes_, self._flops_rate("bf16", "attention"))

    def _mla_decode(self, k: MlaDecode) -> float:
        # the key does not name the engine's layout: an FP8 cache is read as FlashMLA's (the model default)
        per_token = MlaFp8KvLayout.flashmla.entry_bytes(512, 64) if _dtype_bytes(k.kv_dtype) < 2 else 1152
        flops = 2.0 * k.batch * k.heads * k.kv_len * (576 + 512)
        bytes_ = k.batch * k.kv_len * per_token
        return self._time(flops, bytes_, self._flops_rate("bf16", "attention"))

    def _dsa_prefill(self, k: DsaPrefill) -> float:
        # query-key pairs of a causal prefill where each query sees at most index_topk keys
        topk = min(k.seq, k.index_topk)
        pairs = topk * (topk + 1) / 2 + (k.seq - topk) * topk
        rate = self._flops_rate("bf16", "attention")
        if self.system.compute_capability < 100 and k.kv_len <= k.index_topk:  # dense MHA
            flops = 2.0 * k.batch * k.heads * pairs * (k.qk_dim + k.v_dim)
            bytes_ = k.batch * k.seq * k.heads * (2 * k.qk_dim + 2 * k.v_dim) * 2
            return self._time(flops, bytes_, rate)
        heads = k.heads
        fp8 = _dtype_bytes(k.kv_dtype) < 2
        if self.system.compute_capability < 100 or not fp8:  # FlashMLA's sparse kernel: padded heads
            padded = DSA_SPARSE_PREFILL_HEADS[90 if self.system.compute_capability < 100 else 100]
            heads = max(heads, padded)
        # the keys a query gathers are read through L2 (every head of a query shares them): the cache is
        # counted once per token, with the queries and outputs
        entry = _mla_entry_bytes(k.kv_dtype)
        flops = 2.0 * k.batch * heads * pairs * (DSA_QK_DIM + DSA_V_DIM)
        bytes_ = k.batch * k.seq * (k.heads * (DSA_QK_DIM + DSA_V_DIM) * 2 + entry)
        return self._time(flops, bytes_, rate)

    def _dsa_decode(self, k: DsaDecode) -> float:
        keys = min(k.kv_len, k.index_topk)
        flops = 2.0 * k.batch * k.heads * keys * (DSA_QK_DIM + DSA_V_DIM)
        bytes_ = k.batch * keys * _mla_entry_bytes(k.kv_dtype)
        return self._time(flops, bytes_, self._flops_rate("bf16", "attention"))

    def _dsa_indexer(self, k: DsaIndexer) -> float:
        """Each of `new` queries scores the keys up to its position: the same DeepGEMM MQA-logits kernel and
        top-k as DeepSeek-V4's indexer (SGLang 0.5.10 layers/attention/nsa/nsa_indexer.py), plus the read of
        the indexer keys (a decode step's main cost)."""
        logits = k.batch * k.new * (k.past + (k.new + 1) / 2)
        keys = k.batch * (k.past + k.new) * (k.head_dim + k.head_dim // 128 * 4)
        return self._indexer_prefill(logits, k.heads, k.head_dim, keys)

    def _gdn_prefill(self, k: GdnPrefill) -> float:
        """Per token and value head: three state-sized matmuls (the state's contribution to the new
        values, its update and the outputs read from it: 6 k_dim x v_dim flops) and the intra-chunk ones
        (K K^T, Q K^T, the WY products A K and A V, the masked scores times the values:
        2 x 64 x (3 k_dim + 2 v_dim)); bytes: the conv's input and output, q, k, v, the values' two
        rewrites and the outputs in bf16, each chunk's state written and read in bf16, each sequence's state
        and conv window read and written."""
        tokens, state = k.batch * k.seq, k.v_heads * k.k_dim * k.v_dim
        qk, v = k.k_heads * k.k_dim, k.v_heads * k.v_dim
        channels = 2 * qk + v
        per_head = 6 * k.k_dim * k.v_dim + 2 * GDN_CHUNK * (3 * k.k_dim + 2 * k.v_dim)
        flops = tokens * (k.v_heads * per_head + 2 * channels * k.conv_kernel)
        chunks = k.batch * math.ceil(k.seq / GDN_CHUNK)
        per_sequence = 2 * (state * _dtype_bytes(k.state_dtype) + channels * (k.conv_kernel - 1) * 2)
        bytes_ = (
            tokens * (2 * channels + channels + 3 * v) * 2 + chunks * state * 2 * 2 + k.batch * per_sequence
        )
        return self._time(flops, bytes_, self._flops_rate("bf16", "attention"), GDN_PREFILL_KERNELS)

    def _gdn_decode(self, k: GdnDecode) -> float:
        """Each token reads and writes its sequence's state and conv window; about 7 flops per state entry
        (the decay, k^T S, the rank-one update, q^T S) on the CUDA cores."""
        state = k.v_heads * k.k_dim * k.v_dim
        channels = 2 * k.k_heads * k.k_dim + k.v_heads * k.v_dim
        per_sequence = 2 * (state * _dtype_bytes(k.state_dtype) + channels * (k.conv_kernel - 1) * 2)
        bytes_ = k.batch * (per_sequence + channels * 2 * 2 + k.v_heads * k.v_dim * 2)
        flops = k.batch * (7.0 * state + 2 * channels * k.conv_kernel)
        return self._time(flops, bytes_, self._flops_rate(Dtype.fp32.compute), GDN_DECODE_KERNELS)

    def _dsv4_context(self, k: Dsv4Context) -> float:
        csa = k.op in DSV4_CSA_OPS
        topk = DSV4_TOPK.get(k.native_heads, 1024)
        seq = k.seq
        attn_rate = self._flops_rate("bf16", "attention")
        if csa:
            compressed = seq / 4
            keys = min(topk, compressed / 2) + min(seq, DSV4_WINDOW)
        else:
            keys = seq / 128 / 2 + min(seq, DSV4_WINDOW)
        heads = dsv4_kernel_heads(k.heads)
        attn_flops = 4.0 * seq * heads * keys * DSV4_HEAD_DIM
        compress_flops = 2.0 * seq * 2 * DSV4_HEAD_DIM * 2
        bytes_ = seq * (heads * DSV4_HEAD_DIM * 2 * 2 + DSV4_MAIN_ENTRY_FP8 * 2)
        flops = k.batch * (attn_flops + compress_flops)
        t = self._time(flops, k.batch * bytes_, attn_rate, kernels=3)
        if csa:  # each query scores the compressed entries before it (causal)
            t += self._indexer_prefill(k.batch * seq * compressed / 2)
        return t

    def _indexer_prefill(
        self, logits: float, heads: int = INDEXER_HEADS, dim: int = INDEXER_DIM, key_bytes: float = 0.0
    ) -> float:
        """The indexer's scores of a prefill (`logits` of them: queries x visible compressed entries), on
        every rank that runs it (the indexer has no heads to split: TP replicates it). Two kernels: the fp8
        MQA logits, then a top-k per row over the logits it wrote to HBM. `key_bytes`: the indexer keys read
        besides (counted where they matter: DSA's)."""
        tensor = 2.0 * logits * heads * dim / self._flops_rate("fp8")
        # the CUDA cores at the fp8 GEMMs' fraction of peak (no measurement of their own)
        cuda_cores = self.system.sm_count * FP32_LANES_PER_SM * SM_CLOCK_HZ * self.eff.gemm_compute["fp8"]
        epilogue = logits * heads * EPILOGUE_INSTRUCTIONS_PER_HEAD / cuda_cores
        # Hopper's kernel waits for its WGMMAs before each epilogue (warpgroup_wait<0>), so the two add up;
        # Blackwell's accumulates in tensor memory while other warps run the epilogue, so they overlap
        compute = tensor + epilogue if self.system.compute_capability < 100 else max(tensor, epilogue)
        written = (logits * LOGIT_BYTES + key_bytes) / self.bw
        scores_us = max(compute, written) * 1e6 + self.kernel_us
        # top-k reads every logit at least once (a radix select; its rows, 1 MB at 1M tokens, outgrow L2)
        top_k_us = logits * LOGIT_BYTES / self.bw * 1e6 + self.kernel_us
        return scores_us + top_k_us

    def _dsv4_generation(self, k: Dsv4Generation) -> float:
        csa = k.op in DSV4_CSA_OPS
        topk = DSV4_TOPK.get(k.native_heads, 1024)
        kv = k.kv_len
        if csa:
            entries = min(topk, kv // 4) + min(kv, DSV4_WINDOW)
            index_bytes = (kv // 4) * DSV4_INDEXER_ENTRY[Dtype.fp8]
            index_flops = 2.0 * (kv // 4) * INDEXER_HEADS * INDEXER_DIM
        else:
            entries = kv // 128 + min(kv, DSV4_WINDOW)
            index_bytes, index_flops = 0, 0.0
        bytes_ = k.batch * (entries * DSV4_MAIN_ENTRY_FP8 + index_bytes)
        flops = k.batch * (4.0 * dsv4_kernel_heads(k.heads) * entries * DSV4_HEAD_DIM + index_flops)
        return self._time(flops, bytes_, self._flops_rate("bf16", "attention"), kernels=3 if csa else 2)

    def _moe(self, k: Moe) -> float:
        local_experts = max(1, k.experts // k.ep)
        assignments = k.tokens * k.topk / k.ep
        # experts this rank actually touches (uniform routing): each token picks topk of all experts
        p_hit = 1.0 - (1.0 - k.topk / k.experts) ** k.tokens if k.tokens < 10**6 else 1.0
        touched = local_experts * p_hit
        wb = _dtype_bytes(k.dtype)
        flops = 2.0 * 3 * assignments * k.hidden * k.inter
        weight_bytes = touched * 3 * k.hidden * k.inter * wb
        if k.dtype == Dtype.int4 and self.int4_experts_bw:
            # read at the engine kernel's measured rate: as many bytes as take that long at the roofline's
            weight_bytes *= self.bw / self.int4_experts_bw
        bytes_ = weight_bytes + assignments * (k.hidden * 2 * 2 + k.inter * 2 * 3)
        # grouped GEMM: per expert the M dimension is small, tile quantization per expert
        per_expert = assignments / max(touched, 1e-9)
        tile_eff = (
            max(min(per_expert / (math.ceil(per_expert / 128) * 128), 1.0), 1 / 16)
            if self.tile_quantized
            else 1.0
        )
        compute = _compute_class(k.dtype)
        if k.dtype == Dtype.mxfp4 and self.mxfp4_experts_compute and self.system.supports_fp4:
            compute = self.mxfp4_experts_compute
        return self._time(flops, bytes_, self._flops_rate(compute) * tile_eff, kernels=3)

    def _comm(self, k: Comm) -> float:
        n = k.gpus
        if n <= 1:
            return 0.0
        in_domain = n <= self.system.nvlink_domain
        link = (self.system.nvlink_gbs if in_domain else self.system.network_gbs) * 1e9
        busbw = link * BUS_EFFICIENCY
        if in_domain and self.peer_allreduce and k.op == OpName.allreduce:
            one_shot = PEER_BARRIER_US + (n - 1) * k.bytes / busbw * 1e6
            two_shot = 2 * PEER_BARRIER_US + 2.0 * (n - 1) / n * k.bytes / busbw * 1e6
            return min(one_shot, two_shot)
        base = COMM_LATENCY_US.get(n, 30.0 + 2.0 * math.log2(n))
        if not in_domain:
            base += 10.0
        if k.op == OpName.allreduce:
            moved = 2.0 * (n - 1) / n * k.bytes
        elif k.op == OpName.p2p:
            moved = k.bytes
        else:
            moved = (n - 1) / n * k.bytes
        return base + moved / busbw * 1e6

    def _elementwise(self, k: Memory) -> float:
        return self._priced(self._elementwise_work(k))

    def _elementwise_work(self, k: Memory) -> Work:
        # no flops: max(0, bytes / bandwidth) is the memory time alone
        return Work(0.0, k.bytes, kernels=k.kernels)
