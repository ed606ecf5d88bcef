"""The reference time that table utilisation is measured against when interpolating.

It is the roofline without its tile-quantization guess: between two collected points the real kernel's tiling
and wave effects are already in the measured values, and a 128-wide tile model that the kernel does not follow
would put steps into the interpolation that the data does not have (a GEMM at M = 700 between M = 512 and 1024
would be charged for a padded 768). Everything else (flops, bytes, launch floor, efficiencies) is the roofline's.
"""

from servelab.perfdb.roofline import Roofline, _compute_class, _dtype_bytes


class SmoothRoofline(Roofline):
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
