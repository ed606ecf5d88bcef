"""A plan's bands (predict/bands.py): an aggregated candidate's TTFT and TPOT take the engine's claimed band
from the calibration's out-of-sample residuals, and its output throughput the band of TPOT turned over
(at a fixed concurrency the output rate goes as 1 / TPOT; no measured throughput row checks it). A
disaggregated candidate keeps the kernel-source band and claims no coverage: the residuals are of aggregated
deployments."""

import math
from pathlib import Path

from servelab.predict.bands import DISAGG_NO_CLAIM, METRICS, NO_CLAIM, calibration_path, engine_band
from servelab.predict.plan.candidates import Candidate


def band_candidates(candidates: list[Candidate], backend: str, calibration: Path | str | None) -> str:
    """Each candidate's band (its low / high fields and `band`), the kernel-source band kept in
    `kernel_band`; returns the plan's note saying what the bands claim."""
    cal = calibration_path(calibration)
    bands = {m: engine_band(cal, backend, m) for m in METRICS}
    claimed = {m: b for m, b in bands.items() if b is not None}
    for c in candidates:
        c.kernel_band = {
            "ttft_ms": [c.ttft_ms_low, c.ttft_ms_high],
            "tpot_ms": [c.tpot_ms_low, c.tpot_ms_high],
            "tok_s_per_gpu": [c.tok_s_per_gpu_low, c.tok_s_per_gpu_high],
        }
        if c.mode != "agg" or len(claimed) < len(METRICS):
            why = DISAGG_NO_CLAIM if c.mode != "agg" else f"no residuals describe {backend}'s predictions"
            c.band = {"claim": None, "source": f"{NO_CLAIM}: {why}"}
            continue
        ttft, tpot = claimed["ttft"].as_dict(c.ttft_ms), claimed["tpot"].as_dict(c.tpot_ms)
        c.ttft_ms_low, c.ttft_ms_high = ttft["low"], ttft["high"]
        c.tpot_ms_low, c.tpot_ms_high = tpot["low"], tpot["high"]
        # a TPOT exp(q) times the predicted one makes the output rate exp(-q) times it
        c.tok_s_per_gpu_low = c.tok_s_per_gpu * math.exp(-claimed["tpot"].high)
        c.tok_s_per_gpu_high = c.tok_s_per_gpu * math.exp(-claimed["tpot"].low)
        c.band = {"claim": claimed["ttft"].claim, "ttft_ms": ttft, "tpot_ms": tpot, "tok_s_per_gpu": "TPOT's"}
    if len(claimed) < len(METRICS):
        return f"bands: {NO_CLAIM} (no residuals describe {backend}'s predictions)"
    t, d = claimed["ttft"], claimed["tpot"]
    return (
        f"bands of aggregated candidates: TTFT {t.describe()}; TPOT {d.describe()}; tok/s/GPU from TPOT's "
        f"band; disaggregated candidates: {NO_CLAIM}"
    )
