"""The residuals file `servelab calibrate engines` writes (calibrate/residuals.py) is what the bands read
(predict/bands.py): each row's load and lengths, and the calibration's system, which place a prediction
inside or outside the rows."""

import json
import math

from servelab.calibrate.document import Provenance
from servelab.calibrate.residuals import residuals_path, write_residuals
from servelab.predict.band_domain import Domain
from servelab.predict.bands import read_residuals
from servelab.predict.engines import shipped_calibration


def test_the_shipped_residuals_place_their_rows():
    rows = read_residuals(residuals_path(shipped_calibration()))
    domain = Domain.of([r for r in rows if r.engine == "vllm"])
    assert len(rows) == 458 and {r.system for r in rows} == {"h200_sxm"}
    assert domain.families == ("gpt-oss", "llama", "qwen")
    assert all(r.concurrency > 0 and r.isl > 0 and r.osl > 0 for r in rows)


def test_what_the_writer_writes_the_bands_read(tmp_path):
    shipped = json.loads(residuals_path(shipped_calibration()).read_text())
    made = Provenance.model_validate(shipped["provenance"])
    calibration = tmp_path / "mine.json"
    written = shipped["rows"][:3]
    write_residuals(residuals_path(calibration), made, calibration, written)
    rows = read_residuals(residuals_path(calibration))
    for row, r in zip(written, rows, strict=True):
        assert (r.engine, r.family, r.system) == (row["engine"], row["family"], made.settings.system)
        assert (r.concurrency, r.isl, r.osl) == (row["concurrency"], row["isl"], row["osl"])
        assert r.ttft == math.log(row["ttft_ms"] / row["pred_ttft_ms"])
