"""scripts/replace_engine_fit.py writes one engine's refit into a calibration file and its residuals file:
that engine's entries and residual rows from the refit, every other engine's as they were, the summary line
of the residual rows recomputed from them, and the provenance naming the refit."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.calibrate.residuals import residuals_path
from servelab.predict.engines import shipped_calibration

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "replace_engine_fit.py"
WRITTEN = "as written, out of sample"


def _run(*args: Path | str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


@pytest.fixture
def files(tmp_path):
    """A copy of the shipped calibration and its residuals, and a refit of TensorRT-LLM made from them: its
    step term doubled and its residual rows' TTFT predictions 10 % longer."""
    into = tmp_path / "calibrated.json"
    shutil.copy(shipped_calibration(), into)
    shutil.copy(residuals_path(shipped_calibration()), residuals_path(into))
    doc = json.loads(into.read_text())
    doc["engines"]["trtllm"]["params"]["step_overhead_us"] *= 2
    doc["cv_by_family"]["trtllm/llama"]["ttft"]["median"] = 0.5
    refit = tmp_path / "refit.json"
    refit.write_text(json.dumps(doc))
    residuals = json.loads(residuals_path(into).read_text())
    residuals["rows"] = [
        {**r, "pred_ttft_ms": r["pred_ttft_ms"] * 1.1} for r in residuals["rows"] if r["engine"] == "trtllm"
    ]
    residuals_path(refit).write_text(json.dumps(residuals))
    return into, refit


def test_the_refit_engine_is_replaced_and_the_others_kept(files):
    into, refit = files
    before, rows_before = json.loads(into.read_text()), json.loads(residuals_path(into).read_text())["rows"]
    done = _run(into, refit, "trtllm", "servelab calibrate engines --csv trtllm_rows.csv")
    assert done.returncode == 0, done.stderr
    after, rows_after = json.loads(into.read_text()), json.loads(residuals_path(into).read_text())["rows"]
    fit = json.loads(refit.read_text())["engines"]["trtllm"]
    assert after["engines"]["trtllm"] == fit and after["engines"]["sglang"] == before["engines"]["sglang"]
    assert after["cv_by_family"]["trtllm/llama"]["ttft"]["median"] == 0.5
    assert {k: v for k, v in after["cv_by_family"].items() if not k.startswith("trtllm/")} == {
        k: v for k, v in before["cv_by_family"].items() if not k.startswith("trtllm/")
    }
    assert list(after) == list(before) and list(after["cv_by_family"]) == list(before["cv_by_family"])
    # the residual rows: TensorRT-LLM's from the refit, in the file's order, the others untouched
    assert [r["id"] for r in rows_after] == [r["id"] for r in rows_before]
    for old, new in zip(rows_before, rows_after, strict=True):
        scale = 1.1 if old["engine"] == "trtllm" else 1.0
        assert new["pred_ttft_ms"] == pytest.approx(old["pred_ttft_ms"] * scale, rel=1e-12)
    # the summary line of those rows follows them; the lines the files cannot recompute stay
    assert after["errors"][WRITTEN]["ttft"]["median"] != before["errors"][WRITTEN]["ttft"]["median"]
    assert after["errors"][WRITTEN]["tpot"] == pytest.approx(before["errors"][WRITTEN]["tpot"], rel=1e-4)
    assert after["errors"]["fitted (in sample)"] == before["errors"]["fitted (in sample)"]
    assert (
        "then trtllm refitted on its rows alone by servelab calibrate engines --csv" in after["_provenance"]
    )


def test_a_refit_of_the_same_fit_changes_nothing_but_the_provenance(files, tmp_path):
    into, _ = files
    same = tmp_path / "same.json"
    shutil.copy(into, same)
    residuals = json.loads(residuals_path(into).read_text())
    residuals["rows"] = [r for r in residuals["rows"] if r["engine"] == "trtllm"]
    residuals_path(same).write_text(json.dumps(residuals))
    before = json.loads(into.read_text())
    assert _run(into, same, "trtllm", "refit").returncode == 0
    after = json.loads(into.read_text())
    for key in set(before) - {"_provenance", "provenance", "errors"}:
        assert after[key] == before[key], key
    # the summary line recomputed from the rows as the residuals file rounds them
    assert after["errors"][WRITTEN]["ttft"] == pytest.approx(before["errors"][WRITTEN]["ttft"], rel=1e-5)


@pytest.mark.parametrize(
    "spoil,said",
    [
        (lambda doc, rows: doc["verdicts"].pop("trtllm"), "refit: no trtllm fit in it"),
        (lambda doc, rows: rows.pop(), "not the trtllm rows of"),
    ],
)
def test_a_refit_that_does_not_fit_is_refused_in_one_line(files, spoil, said):
    into, refit = files
    doc, residuals = json.loads(refit.read_text()), json.loads(residuals_path(refit).read_text())
    spoil(doc, residuals["rows"])
    refit.write_text(json.dumps(doc))
    residuals_path(refit).write_text(json.dumps(residuals))
    kept = into.read_bytes()
    done = _run(into, refit, "trtllm", "refit")
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert into.read_bytes() == kept
