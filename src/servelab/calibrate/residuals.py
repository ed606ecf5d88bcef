"""The calibration's out-of-sample residuals, one per measured row: what predict/bands.py builds serving-level
bands from (and accuracy/bands.py measures their coverage on).

Each row's prediction is the one the written calibration makes out of sample ("as written, out of sample"):
a kept engine's rows priced at the fit that left the row's model family out, the other engines' rows at the
documented defaults (fitted on no row). In-sample predictions never enter: a band built from them would be
too narrow by what the fit learned from the very rows it is judged on. Each row also keeps the kernel-source
band of that prediction (the step model's low and high times carried through the simulation), so that
whether a wide kernel band goes with a large residual can be read off the rows.

The file sits beside the calibration file it belongs to (`calibrated.json` -> `calibrated.residuals.json`),
written by the same `servelab calibrate engines` run, with the same provenance.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from servelab.calibrate.document import Provenance, Verdict
from servelab.calibrate.pool import Jobs, try_price_rows
from servelab.calibrate.price import Pricer
from servelab.calibrate.rows import Case
from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.predict.bands import residuals_path

__all__ = ["Banded", "out_of_sample_rows", "residuals_path", "write_residuals"]

FORMAT = 1
WHAT = (
    "per measured row: the measured TTFT and TPOT (ms) and the calibration's out-of-sample prediction of "
    "them (a kept engine's fit with the row's model family left out; the documented defaults for an "
    "engine whose fit was not kept), with that prediction's kernel-source band (low, high)"
)


@dataclass
class Banded:
    """A pricer that answers a row's TTFT and TPOT with their kernel-source bands: (ttft, tpot, ttft_low,
    ttft_high, tpot_low, tpot_high), in ms. Static mode has no band: low = high = the estimate."""

    price: Pricer

    def __call__(self, case: Case, params: dict[str, float]) -> tuple[float, ...]:
        ttft, tpot = self.price(case, params)
        if self.price.mode != "aggregated":
            return ttft, tpot, ttft, ttft, tpot, tpot
        agg = self.price.estimate(case, params)
        extra = ttft - agg.ttft_ms  # TTFT terms fitted outside the simulator move the band with the estimate
        return (
            ttft,
            tpot,
            agg.ttft_ms_low + extra,
            agg.ttft_ms_high + extra,
            agg.tpot_ms_low,
            agg.tpot_ms_high,
        )


def out_of_sample_rows(
    cases: list[Case],
    price: Pricer,
    jobs: Jobs,
    documented: dict[str, dict[str, float]],
    fold_params: dict[str, dict[str, float]],
    chosen: dict[Engine, Verdict],
) -> list[dict]:
    """Every row priced as the written calibration predicts it out of sample, with its kernel-source band."""
    kept = {e for e, v in chosen.items() if v.kept}
    rows = [
        (c, fold_params[f"{c.engine}/{c.family}"] if c.engine in kept else documented[c.engine])
        for c in cases
    ]
    priced = try_price_rows(rows, Banded(price), jobs, "out-of-sample residuals with their bands")  # type: ignore[arg-type]
    out = []
    for c, p in zip(cases, priced, strict=True):
        if isinstance(p, ServelabError):
            raise p
        ttft, tpot, t_lo, t_hi, p_lo, p_hi = p  # type: ignore[misc]
        out.append(
            {
                "id": c.row_id,
                "engine": str(c.engine),
                "family": c.family,
                "model": c.model_name,
                "parallel": c.parallel.label(),
                "concurrency": c.concurrency,
                "isl": c.isl,
                "osl": c.osl,
                "fit": "family left out" if c.engine in kept else "documented defaults",
                "ttft_ms": c.ttft_ms,
                "tpot_ms": c.tpot_ms,
                "pred_ttft_ms": round(float(ttft), 4),
                "pred_tpot_ms": round(float(tpot), 5),
                "kernel_band_ttft_ms": [round(float(t_lo), 4), round(float(t_hi), 4)],
                "kernel_band_tpot_ms": [round(float(p_lo), 5), round(float(p_hi), 5)],
            }
        )
    return out


def write_residuals(path: Path, made: Provenance, calibration: Path, rows: list[dict]) -> None:
    doc = {
        "residuals_format": FORMAT,
        "_provenance": made.line(len(rows)),
        "provenance": made.model_dump(mode="json"),
        "calibration": calibration.name,
        "what": WHAT,
        "rows": rows,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
