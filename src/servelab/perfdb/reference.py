"""The reference time that table utilisation is measured against when interpolating.

It is the roofline without its tile-quantization guess: between two collected points the real kernel's tiling
and wave effects are already in the measured values, and a 128-wide tile model that the kernel does not follow
would put steps into the interpolation that the data does not have (a GEMM at M = 700 between M = 512 and 1024
would be charged for a padded 768). Everything else (flops, bytes, launch floor, efficiencies) is the roofline's.

Prefill attention (GQA and MLA) also accounts for parallelism: a flash-attention kernel runs one CTA per
(sequence, head, 128-query tile), and with fewer CTAs than SMs part of the GPU idles. The compute rate is scaled
by min(1, CTAs / SMs) -- smooth, no wave steps. On the H200 tables this took the prefill leave-one-out p90 from
16.9 % to 12.2 % and MLA prefill from 18.8 % to 11.2 % (docs/accuracy.md, section 2).
"""

import math

from servelab.perfdb.roofline import Roofline, _compute_class, _dtype_bytes, efficiencies

QUERY_TILE = 128


class SmoothRoofline(Roofline):
    """Uses the datasheet-derived default efficiencies, never the per-system fit: bench/fit_roofline.py tunes the
    fallback roofline to the tables, and refitting it must not move the interpolation between measured points
    (on the H200 tables, a reference built on the fitted numbers took the GEMM leave-one-out p90 from 9.4 % to
    10.8 %), nor make the accuracy stored at merge time stale."""

    def __init__(self, system):
        super().__init__(system)
        self.eff = eff = efficiencies("")  # the "default" block alone
        self.bw = system.hbm_bw_tbs * 1e12 * eff["memory"]
        self.kernel_us = eff["kernel_us"]
        self.band = (eff["band_low"], eff["band_high"])

    def _occupancy(self, batch: int, heads: int, seq: int) -> float:
        return min(1.0, batch * heads * math.ceil(seq / QUERY_TILE) / self.system.sm_count)

    def _attention_prefill(self, k) -> float:
        keys = min(k.seq, k.window) if k.window else (k.seq + 1) / 2
        flops = 4.0 * k.batch * k.heads * k.seq * keys * k.head_dim
        bytes_ = k.batch * k.seq * (2 * k.heads + 2 * k.kv_heads) * k.head_dim * 2
        rate = self._flops_rate("bf16", "attention") * self._occupancy(k.batch, k.heads, k.seq)
        return self._time(flops, bytes_, rate)

    def _mla_prefill(self, k) -> float:
        flops = 2.0 * k.batch * k.heads * k.seq * (k.seq + 1) / 2 * (192 + 128)
        bytes_ = k.batch * k.seq * k.heads * (192 * 2 + 128 * 2) * 2
        rate = self._flops_rate("bf16", "attention") * self._occupancy(k.batch, k.heads, k.seq)
        return self._time(flops, bytes_, rate)

    def _gemm(self, k) -> float:
        wb = _dtype_bytes(k.dtype)
        act = 1.0 if _compute_class(k.dtype) == "fp8" else 2.0
        flops = 2.0 * k.m * k.n * k.k
        bytes_ = k.n * k.k * wb + k.m * k.k * act + k.m * k.n * 2
        return self._time(flops, bytes_, self._flops_rate(_compute_class(k.dtype)))

    def _moe(self, k) -> float:
        local_experts = max(1, k.experts // k.ep)
        assignments = k.tokens * k.topk / k.ep
        p_hit = 1.0 - (1.0 - k.topk / k.experts) ** k.tokens if k.tokens < 10**6 else 1.0
        touched = local_experts * p_hit
        wb = _dtype_bytes(k.dtype)
        flops = 2.0 * 3 * assignments * k.hidden * k.inter
        bytes_ = touched * 3 * k.hidden * k.inter * wb + assignments * (k.hidden * 2 * 2 + k.inter * 2 * 3)
        return self._time(flops, bytes_, self._flops_rate(_compute_class(k.dtype)), kernels=3)


def reference_fn(system):
    """key -> reference microseconds for this system."""
    smooth = SmoothRoofline(system)
    return lambda key: smooth.latency(key).us
