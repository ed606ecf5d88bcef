"""The parts of the versioned calibration file (calibrate/document.py, `calibration_format` 2;
predict/data/calibrated.json is the shipped one): fitted engine parameters with their provenance (sources
with hashes, servelab version and git sha, date, command, settings), the cross-validated errors they were
judged by, and which engines' fits were kept. predict/engines.py reads it (`--calibration FILE`)."""

import datetime as dt
import hashlib
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

import servelab
from servelab.calibrate.document import FORMAT, EngineFit, Provenance, Settings, SourceRecord, Verdict
from servelab.calibrate.params import PARAMS
from servelab.calibrate.rows import Case
from servelab.engines import Engine
from servelab.results.provenance import git_sha

__all__ = ["CALIBRATED", "FORMAT", "LOSS", "as_written_errors", "engine_entries", "provenance", "verdicts"]

PACKAGE = Path(servelab.__file__).resolve().parent
CALIBRATED = PACKAGE / "predict" / "data" / "calibrated.json"
LOSS = "soft-L1 (scale 0.1) of log(pred/measured), TTFT and TPOT"


def servelab_state() -> str:
    """The predictor the fit was made against: git commit (dirty or not) and a digest of the perf data
    files."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(PACKAGE), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(PACKAGE.parent), "status", "--porcelain", "."],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit, dirty = "unknown", ""
    digest = hashlib.sha256()
    for path in sorted(
        [
            *(PACKAGE / "perfdb" / "data").rglob("*.*"),
            PACKAGE / "predict" / "data" / "engines.json",
            *(PACKAGE / "engines").glob("*/defaults.json"),
        ]
    ):
        if path.is_file() and path.suffix in (".parquet", ".json"):
            digest.update(path.name.encode() + path.read_bytes())
    return (
        f"servelab {commit or 'unknown'}{' (modified)' if dirty else ''}, perf data {digest.hexdigest()[:12]}"
    )


def engine_entries(
    fitted: Mapping[Engine, dict[str, float]],
    cases: list[Case],
    with_proposed_terms: bool,
    verdicts: dict[Engine, Verdict] | None = None,
) -> dict[Engine, EngineFit]:
    """Each engine's fitted parameters (the terms EngineProfile lacks listed apart), the parameter set they
    are (with every set's cross-validated score, from `verdicts`), rows and model families."""
    out = {}
    for e, p in fitted.items():
        verdict = (verdicts or {}).get(Engine(e))
        out[Engine(e)] = EngineFit(
            params={k: round(v, 3) for k, v in p.items() if k in PARAMS},
            proposed_terms={k: round(v, 4) for k, v in p.items() if k not in PARAMS}
            if with_proposed_terms
            else None,
            param_set=verdict.param_set if verdict else None,
            set_scores=verdict.set_scores if verdict else None,
            rows=sum(c.engine == e for c in cases),
            families=sorted({c.family for c in cases if c.engine == e}),
            models=sorted({c.model_name for c in cases if c.engine == e}),
        )
    return out


def verdict_score(ttft: np.ndarray, tpot: np.ndarray) -> float:
    """What a verdict compares: the median and p90 errors of TTFT and TPOT, summed (the four accuracy
    targets of docs/accuracy.md section 4). A fit that helps the medians while one unseen family gets far
    worse moves the p90s, and is not kept."""
    return float(sum(np.median(e) + np.percentile(e, 90) for e in (ttft, tpot)))


def verdicts(
    engines: Sequence[str],
    cases: list[Case],
    before: tuple[np.ndarray, np.ndarray],
    cv_by_set: dict[str, dict],
) -> dict[Engine, Verdict]:
    """Per engine, the parameter set whose fit predicts unseen model families best (verdict_score of its
    cross-validated errors; `cv_by_set`: set name -> row id -> (TTFT, TPOT) error, largest set first, a tie
    going to the smaller set), kept only when it beats the documented defaults on the same rows."""
    out = {}
    for e in engines:
        idx = [i for i, c in enumerate(cases) if c.engine == e]
        d_score = verdict_score(before[0][idx], before[1][idx])
        scores = {}
        for name, cv_rows in cv_by_set.items():
            cv_err = np.array([cv_rows[cases[i].row_id] for i in idx])
            scores[name] = verdict_score(cv_err[:, 0], cv_err[:, 1])
        order = list(scores)
        best = min(order, key=lambda n: (scores[n], -order.index(n)))
        out[Engine(e)] = Verdict(
            defaults_score=round(d_score, 4),
            param_set=best,
            cv_score=round(scores[best], 4),
            set_scores={n: round(v, 4) for n, v in scores.items()},
            kept=scores[best] < d_score,
        )
    return out


def as_written_errors(
    cases: list[Case], before: tuple[np.ndarray, np.ndarray], cv_rows: dict, verdicts: dict[Engine, Verdict]
) -> tuple[np.ndarray, np.ndarray]:
    """The out-of-sample error of what the file makes servelab predict: a kept engine's rows as its fit
    predicts each family left out of it, the other engines' rows at the documented defaults (fitted on none
    of them)."""
    kept = {e for e, v in verdicts.items() if v.kept}
    rows = [
        cv_rows[c.row_id] if c.engine in kept else (before[0][i], before[1][i]) for i, c in enumerate(cases)
    ]
    errors = np.array(rows, dtype=float).reshape(-1, 2)
    return errors[:, 0], errors[:, 1]


def provenance(command: str, sources: list[SourceRecord], settings: Settings) -> Provenance:
    """Who made the calibration, from what, and how."""
    return Provenance(
        servelab_version=servelab.__version__,
        git_sha=git_sha(),
        servelab_state=servelab_state(),
        date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        command=command,
        sources=sources,
        settings=settings,
    )
