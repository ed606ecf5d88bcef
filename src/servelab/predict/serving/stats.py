"""Serving metrics from simulated request timestamps, with the definitions `vllm bench serve` uses
(shared/reference/serving-metrics.md): TTFT = first token - arrival; E2EL = last token - arrival;
TPOT = (E2EL - TTFT) / (output_len - 1); ITL = every gap between consecutive streamed chunks, pooled over requests
(with speculative decoding a chunk carries several tokens, as in vLLM). Percentiles interpolate linearly between
ranks (numpy's default). Plain Python: the arrays are small and this avoids importing numpy on the CLI path."""

from __future__ import annotations

PCTS = (50, 90, 99)


def _percentile(ordered: list[float], p: float) -> float:
    pos = (len(ordered) - 1) * p / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary_ms(values) -> dict[str, float]:
    ordered = sorted(v * 1000.0 for v in values) or [0.0]
    out = {"mean": sum(ordered) / len(ordered)}
    for p in PCTS:
        out[f"p{p}"] = _percentile(ordered, p)
    return out


def weighted_summary_ms(samples: list[tuple[float, float]]) -> dict[str, float]:
    """Mean and percentiles of values given as (value_s, weight) pairs (a stretch of identical steps is one pair):
    the percentile of the list where each value is repeated `weight` times, interpolated between pair centres."""
    if not samples:
        return summary_ms([])
    pairs = sorted((v * 1000.0, w) for v, w in samples if w > 0)
    total = sum(w for _, w in pairs)
    out = {"mean": sum(v * w for v, w in pairs) / total}
    centers, cum = [], 0.0
    for _, w in pairs:
        centers.append((cum + w / 2.0) / total * 100.0)
        cum += w
    for p in PCTS:
        out[f"p{p}"] = _interp(p, centers, [v for v, _ in pairs])
    return out


def _interp(x: float, xs: list[float], ys: list[float]) -> float:
    if x <= xs[0]:
        return ys[0]
    for i in range(1, len(xs)):
        if x <= xs[i]:
            f = (x - xs[i - 1]) / (xs[i] - xs[i - 1]) if xs[i] > xs[i - 1] else 0.0
            return ys[i - 1] + (ys[i] - ys[i - 1]) * f
    return ys[-1]


def request_metrics(requests) -> list[dict[str, list[float]]]:
    """Per-request TTFT, TPOT, E2EL in seconds, one dict per clock (0 nominal, 1 low, 2 high)."""
    out = []
    for k in range(3):
        ttft = [r.first[k] - r.arrival[k] for r in requests]
        e2el = [r.finish[k] - r.arrival[k] for r in requests]
        tpot = [(r.finish[k] - r.first[k]) / (r.osl - 1) for r in requests if r.osl > 1]
        out.append({"ttft_ms": ttft, "tpot_ms": tpot, "e2el_ms": e2el})
    return out
