"""Write one engine's refit into a calibration file and its residuals file, the other engines as they were.

    python scripts/replace_engine_fit.py CALIBRATION REFIT ENGINE "COMMAND"
    # e.g. src/servelab/predict/data/calibrated.json trtllm.json trtllm
    #      "servelab calibrate engines --csv trtllm_rows.csv --jobs 1 (servelab 8d13a7c, 2026-12-07)"

REFIT is what `servelab calibrate engines` wrote from ENGINE's rows alone. Each engine is fitted and
cross-validated on its own rows, so its fit, verdict, figures by family and residual rows are those a run on
every row would write; they replace ENGINE's in CALIBRATION and in its residuals file. Of the summary lines
over every engine's rows, "as written, out of sample" is recomputed from the merged residual rows (they are
its rows). The other summary lines and the comparison with AIConfigurator pool every engine's in-sample or
left-out predictions, which neither file keeps, so they stay as the full run wrote them, and the provenance's
command says so beside COMMAND, the refit's command.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from servelab.calibrate.document import CalibrationDocument, Errors
from servelab.calibrate.fit import summary
from servelab.calibrate.residuals import residuals_path
from servelab.errors import ServelabError

WRITTEN = "as written, out of sample"


def _engine_keys(table: dict, engine: str) -> set[str]:
    return {k for k in table if k == engine or k.startswith(f"{engine}/")}


def _replace(into: dict, refit: dict, engine: str) -> dict:
    """`into` with `engine`'s entries (the engine and engine/family keys) taken from `refit`, where the
    engine's entries were (at the end where it had none), so that the file keeps its order."""
    new = {k: v for k, v in refit.items() if k in _engine_keys(refit, engine)}
    out: dict = {}
    for k, v in into.items():
        out.update(new if k in _engine_keys(into, engine) else {k: v})
    return {**out, **new}


def _as_written(rows: list[dict]) -> Errors:
    """The summary line of the residual rows: |predicted / measured - 1| of TTFT and TPOT."""
    ttft = np.array([abs(r["pred_ttft_ms"] / r["ttft_ms"] - 1) for r in rows])
    tpot = np.array([abs(r["pred_tpot_ms"] / r["tpot_ms"] - 1) for r in rows])
    return Errors.model_validate({"ttft": summary(ttft), "tpot": summary(tpot)})


def merged(doc: CalibrationDocument, refit: CalibrationDocument, engine: str, rows: list[dict], command: str):
    """The calibration document with `engine` refitted, given the merged residual rows."""
    if engine not in refit.verdicts:
        raise ServelabError(
            f"refit: no {engine} fit in it (fitted: {', '.join(refit.verdicts)})", field="refit"
        )
    out = doc.model_copy(deep=True)
    for part in ("engines", "fitted_not_kept", "verdicts", "recipe_settings"):
        setattr(out, part, _replace(getattr(out, part), getattr(refit, part), engine))
    out.cv_by_family = _replace(out.cv_by_family, refit.cv_by_family, engine)
    out.cv_by_family_by_set = {
        name: _replace(by_family, refit.cv_by_family_by_set[name], engine)
        for name, by_family in out.cv_by_family_by_set.items()
    }
    out.defaults_vs_written.defaults = _replace(
        out.defaults_vs_written.defaults, refit.defaults_vs_written.defaults, engine
    )
    out.defaults_vs_written.as_written = _replace(
        out.defaults_vs_written.as_written, refit.defaults_vs_written.as_written, engine
    )
    out.errors = {**out.errors, WRITTEN: _as_written(rows)}
    out.provenance.command += (
        f'; then {engine} refitted on its rows alone by {command} (its entries and "{WRITTEN}" from that '
        "refit; the other summary lines and aiconfigurator_same_rows as the full run wrote them)"
    )
    out.provenance_line = out.provenance.line(out.rows_used)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("calibration", type=Path, help="the calibration file to write the refit into")
    ap.add_argument("refit", type=Path, help="the calibration file of the engine's refit")
    ap.add_argument("engine")
    ap.add_argument("command", help="the refit's command, as the provenance should cite it")
    args = ap.parse_args(argv)
    try:
        doc, refit = CalibrationDocument.read(args.calibration), CalibrationDocument.read(args.refit)
        residuals = json.loads(residuals_path(args.calibration).read_text())
        refit_rows = json.loads(residuals_path(args.refit).read_text())["rows"]
        if {r["engine"] for r in refit_rows} != {args.engine}:
            raise ServelabError(
                f"{residuals_path(args.refit)}: expected {args.engine}'s rows alone", field="refit"
            )
        refit_by_id = {r["id"]: r for r in refit_rows}
        shipped_ids = [r["id"] for r in residuals["rows"] if r["engine"] == args.engine]
        if sorted(shipped_ids) != sorted(refit_by_id):
            raise ServelabError(
                f"{args.refit}: not the {args.engine} rows of {args.calibration}", field="refit"
            )
        rows = [refit_by_id.get(r["id"], r) for r in residuals["rows"]]  # the file's order
        out = merged(doc, refit, args.engine, rows, args.command)
    except (ServelabError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out.write(args.calibration)
    residuals.update(
        _provenance=out.provenance_line, provenance=out.provenance.model_dump(mode="json"), rows=rows
    )
    residuals_path(args.calibration).write_text(json.dumps(residuals, indent=1) + "\n")
    print(f"wrote {args.calibration} and {residuals_path(args.calibration)}: {args.engine} refitted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
