"""A plan's bands (predict/bands.py): an aggregated candidate's TTFT and TPOT take the engine's claimed band
from the calibration's out-of-sample residuals, and its output throughput the band of TPOT turned over
(at a fixed concurrency the output rate goes as 1 / TPOT; no measured throughput row checks it). A
disaggregated candidate keeps the kernel-source band and claims no coverage: the residuals are of aggregated
deployments; so does a candidate outside the residuals' rows (another system, model family, concurrency per
replica or lengths than theirs), saying why."""

import math
from dataclasses import replace
from pathlib import Path

from servelab.predict.band_domain import Asked
from servelab.predict.bands import DISAGG_NO_CLAIM, NO_CLAIM, calibration_path, claimed, no_claim
from servelab.predict.plan.candidates import Candidate


def band_candidates(
    candidates: list[Candidate], backend: str, calibration: Path | str | None, asked: Asked
) -> str:
    """Each candidate's band (its low / high fields and `band`), the kernel-source band kept in
    `kernel_band`; `asked`: the plan's system, model and lengths (each candidate's concurrency per replica
    replaces its concurrency). Returns the plan's note saying what the bands claim."""
    cal = calibration_path(calibration)
    said = ""  # what the claimed bands are (one engine's, the same for every candidate that has one)
    unclaimed: dict[str, list[int]] = {}  # why an aggregated candidate claims none -> its ranks
    for c in candidates:
        c.kernel_band = {
            "ttft_ms": [c.ttft_ms_low, c.ttft_ms_high],
            "tpot_ms": [c.tpot_ms_low, c.tpot_ms_high],
            "tok_s_per_gpu": [c.tok_s_per_gpu_low, c.tok_s_per_gpu_high],
        }
        if c.mode != "agg":
            c.band = no_claim(DISAGG_NO_CLAIM)
            continue
        bands, why = claimed(cal, backend, replace(asked, concurrency=c.concurrency_per_replica))
        if why:
            c.band = no_claim(why)
            unclaimed.setdefault(why, []).append(c.rank)
            continue
        ttft, tpot = bands["ttft"].as_dict(c.ttft_ms), bands["tpot"].as_dict(c.tpot_ms)
        c.ttft_ms_low, c.ttft_ms_high = ttft["low"], ttft["high"]
        c.tpot_ms_low, c.tpot_ms_high = tpot["low"], tpot["high"]
        # a TPOT exp(q) times the predicted one makes the output rate exp(-q) times it
        c.tok_s_per_gpu_low = c.tok_s_per_gpu * math.exp(-bands["tpot"].high)
        c.tok_s_per_gpu_high = c.tok_s_per_gpu * math.exp(-bands["tpot"].low)
        c.band = {"claim": bands["ttft"].claim, "ttft_ms": ttft, "tpot_ms": tpot, "tok_s_per_gpu": "TPOT's"}
        said = (
            f"bands of aggregated candidates: TTFT {bands['ttft'].describe()}; TPOT "
            f"{bands['tpot'].describe()}; tok/s/GPU from TPOT's band"
        )
    notes = [said] if said else []
    if unclaimed:
        ranks = sorted(rank for r in unclaimed.values() for rank in r)
        whys = dict.fromkeys(part for why in unclaimed for part in why.split("; "))  # each reason once
        notes.append(f"{NO_CLAIM} for candidates {', '.join(map(str, ranks))}: {'; '.join(whys)}")
    return "; ".join([*notes, f"disaggregated candidates: {NO_CLAIM}"])
