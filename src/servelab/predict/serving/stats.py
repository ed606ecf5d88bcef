"""Serving metrics from simulated request timestamps, with the definitions `vllm bench serve` uses
(shared/reference/serving-metrics.md): TTFT = first token - arrival; E2EL = last token - arrival;
TPOT = (E2EL - TTFT) / (output_len - 1); ITL = every gap between consecutive streamed chunks, pooled over requests
(with speculative decoding a chunk carries several tokens, as in vLLM). Percentiles interpolate linearly."""

from __future__ import annotations

import numpy as np

PCTS = (50, 90, 99)


def summary_ms(values) -> dict[str, float]:
    arr = np.asarray(values if len(values) else [0.0], dtype=float) * 1000.0
    out = {"mean": float(arr.mean())}
    for p, v in zip(PCTS, np.percentile(arr, PCTS)):
        out[f"p{p}"] = float(v)
    return out


def weighted_summary_ms(samples: list[tuple[float, float]]) -> dict[str, float]:
    """Mean and percentiles of values given as (value_s, weight) pairs (a stretch of identical steps is one pair)."""
    if not samples:
        return summary_ms([])
    vals = np.fromiter((v for v, _ in samples), float, len(samples)) * 1000.0
    wts = np.fromiter((w for _, w in samples), float, len(samples))
    order = np.argsort(vals)
    vals, wts = vals[order], wts[order]
    cum = np.cumsum(wts)
    total = cum[-1]
    # the value at rank q of the expanded list (linear interpolation between ranks, like numpy's default)
    centers = (cum - wts / 2.0) / total * 100.0
    out = {"mean": float((vals * wts).sum() / total)}
    for p in PCTS:
        out[f"p{p}"] = float(np.interp(p, centers, vals))
    return out


def request_metrics(requests) -> list[dict[str, np.ndarray]]:
    """Per-request TTFT, TPOT, E2EL in seconds, one dict per clock (0 nominal, 1 low, 2 high)."""
    if not requests:
        return [{"ttft_ms": [], "tpot_ms": [], "e2el_ms": []} for _ in range(3)]
    arrival = np.array([r.arrival for r in requests])
    first = np.array([r.first for r in requests])
    finish = np.array([r.finish for r in requests])
    osl = np.array([r.osl for r in requests], dtype=float)[:, None]
    ttft, e2el = first - arrival, finish - arrival
    many = osl[:, 0] > 1
    tpot = ((finish - first) / np.maximum(osl - 1, 1))[many]
    return [{"ttft_ms": ttft[:, k], "tpot_ms": tpot[:, k], "e2el_ms": e2el[:, k]} for k in range(3)]
