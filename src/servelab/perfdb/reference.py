"""The reference time that table utilisation is measured against when interpolating.

It is the roofline without its tile-quantization guess: between two collected points the real kernel's tiling
and wave effects are already in the measured values, and a 128-wide tile model that the kernel does not follow
would put steps into the interpolation that the data does not have (a GEMM at M = 700 between M = 512 and 1024
would be charged for a padded 768). Everything else (flops, bytes, launch floor, efficiencies) is the
roofline's.

Prefill attention (GQA and MLA) also accounts for parallelism: a flash-attention kernel runs one CTA per
(sequence, head, 128-query tile), and with fewer CTAs than SMs part of the GPU idles. The compute rate is
scaled by min(1, CTAs / SMs) -- smooth, no wave steps. On the H200 tables this took the prefill leave-one-out
p90 from 16.9 % to 12.2 % and MLA prefill from 18.8 % to 11.2 % (docs/accuracy.md, section 2).
"""

import math

from servelab.perfdb.roofline import Roofline

QUERY_TILE = 128


class SmoothRoofline(Roofline):
    """Uses the datasheet-derived default efficiencies, never the per-system fit: `servelab calibrate
    roofline` tunes the fallback roofline to the tables, and refitting it must not move the interpolation
    between measured points (on the H200 tables, a reference built on the fitted numbers took the GEMM
    leave-one-out p90 from 9.4 % to 10.8 %), nor make the accuracy stored at merge time stale."""

    tile_quantized = False

    def __init__(self, system):
        super().__init__(system, fitted=False)

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


def reference_fn(system):
    """key -> reference microseconds for this system."""
    smooth = SmoothRoofline(system)
    return lambda key: smooth.latency(key).us
