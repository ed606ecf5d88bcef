"""The engine calibration end to end: fit each engine's overhead parameters (per step, per sequence, kernel
gaps, eager launch cost, MoE prompt tokens) on measured end-to-end TTFT / TPOT, cross-validate leaving one
model family out, and write the fits that transfer to unseen families to a versioned calibration file with its
provenance (by default ./calibrated.json, in the working directory: never the one servelab ships, which a
checkout refreshes by naming it, `--out src/servelab/predict/data/calibrated.json`).

The measurements come from servelab.calibrate.sources (AIConfigurator's silicon_sample.csv, InferenceX result
files, the results store); nothing of them is kept but the fitted numbers and the errors.
"""

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servelab.calibrate import aic
from servelab.calibrate.calibration_file import (
    LOSS,
    as_written_errors,
    engine_entries,
    provenance,
    verdicts,
)
from servelab.calibrate.crossval import fit_param_sets
from servelab.calibrate.document import (
    AicComparison,
    CalibrationDocument,
    DefaultsVsWritten,
    Errors,
    ErrorSummary,
    FamilyErrors,
    RecipeCounts,
    Settings,
    Verdict,
)
from servelab.calibrate.fit import errors_of, summary
from servelab.calibrate.params import KERNEL_TERMS, PARAM_SETS, TTFT_START
from servelab.calibrate.pool import Echo, Jobs, price_rows, workers_for
from servelab.calibrate.price import (
    LENGTH_SPREAD,
    PROMPTS_PER_CONCURRENCY,
    Pricer,
    defaults,
    fit_start,
    pick_mode,
    usable,
)
from servelab.calibrate.residuals import out_of_sample_rows, residuals_path, write_residuals
from servelab.calibrate.rows import ENGINES, Case
from servelab.calibrate.sources import Sources, gather
from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.perfdb.db import perfdb_for
from servelab.specs import load_system

DEFAULT_OUT = "calibrated.json"  # in the working directory


@dataclass
class EngineFitOptions:
    """What to fit on, what to report and what to write."""

    system: str = "h200_sxm"
    mode: str = "auto"
    iters: int = 300  # Nelder-Mead iterations per fit (on the linearized predictor)
    sources: Sources = Sources()  # none named: AIConfigurator's pinned silicon_sample.csv
    limit: int = 0  # fit on at most this many rows per engine (quick runs)
    prompts_per_concurrency: int = PROMPTS_PER_CONCURRENCY
    length_spread: float = LENGTH_SPREAD
    # silicon rows without a recipe replayed as their campaign's client sent them (calibrate.clients), and
    # AIConfigurator's SGLang rows with --enable-mixed-chunk (a what-if the evidence does not decide)
    as_sent: bool = False
    aic_mixed_chunk: bool = False
    ttft_terms: tuple[str, ...] = ()  # TTFT terms the step model lacks, fitted to report what they would buy
    kernel_terms: bool = False  # a kernel-time factor per op family, likewise
    tables: str = "own"  # own: each engine's tables (roofline where none); torch: the torch tables for all
    summary: Path | None = None
    dry_run: bool = False
    out: Path = Path(DEFAULT_OUT)  # relative: in the working directory, never into the installed package
    report: Path | None = None
    aic: bool = False  # also run AIConfigurator's own estimate of the same rows (cached)
    jobs: int = 1  # processes that price rows (0: one per core); the numbers do not depend on it
    # recorded in the file, with `argv`, as the command that made it
    program: str = "servelab calibrate engines"
    argv: tuple[str, ...] = ()

    @property
    def proposes_terms(self) -> bool:
        """Terms EngineProfile lacks are only reported: such a fit never writes the calibration file."""
        return bool(self.ttft_terms) or self.kernel_terms


def _cells(e: Errors) -> str:
    a, b = e.ttft, e.tpot
    return f"{a.median:9.1%} {a.p90:9.1%} {b.median:9.1%} {b.p90:9.1%}"


def _row(name: str, e: Errors) -> str:
    return f"{name:32s} {e.ttft.n:5d} {_cells(e)}"


def _errors(ttft: np.ndarray, tpot: np.ndarray) -> Errors:
    return Errors.model_validate({"ttft": summary(ttft), "tpot": summary(tpot)})


def calibrate_engines(opts: EngineFitOptions, echo: Echo = print) -> CalibrationDocument:
    """Fit, cross-validate, report through `echo`, write what was asked; returns the calibration document."""
    t0 = time.time()
    workers_for(opts.jobs)  # a bad --jobs refused before the sources are read
    got = gather(opts.sources, opts.system)
    mode = pick_mode(opts.mode)
    system = load_system(opts.system)
    tables = perfdb_for(system, "torch") if opts.tables == "torch" else None
    documented = defaults()  # the documented defaults, never a previous calibration
    start = fit_start()
    if opts.ttft_terms:
        start = {e: {**p, **{n: TTFT_START[n] for n in opts.ttft_terms}} for e, p in start.items()}
    if opts.kernel_terms:
        start = {e: {**p, **{n: 1.0 for n in KERNEL_TERMS}} for e, p in start.items()}

    cases, skipped = got.cases, got.skipped
    if not cases:
        raise ServelabError(
            f"no usable {opts.system} rows in the sources ({got.rows_read} read; skipped: {skipped})",
            field="system",
        )
    workers = workers_for(opts.jobs, len(cases))
    if opts.jobs > workers:
        echo(f"note: --jobs {opts.jobs}: {workers} processes ({os.cpu_count()} cores, {len(cases)} rows)")
    jobs = Jobs(workers, echo, started=t0)
    replay = {"as_sent": opts.as_sent, "aic_mixed_chunk": opts.aic_mixed_chunk}
    cases = usable(cases, Pricer(system, mode, tables=tables, moe_fits=None, **replay), skipped, jobs)
    if opts.limit:
        cases = [c for e in ENGINES for c in [x for x in cases if x.engine == e][: opts.limit]]
    # fitted without the record of a fit's rows (moe_fits): every row priced with the terms it is fitted with
    price = Pricer(
        system, mode, opts.prompts_per_concurrency, opts.length_spread, tables, moe_fits=None, **replay
    )
    for src in got.sources:
        echo(f"{src.kind}: {src.path}: {src.rows_read} rows read, {src.rows_used} usable")
    if got.aic_python:
        echo(f"AIConfigurator's sample from {got.aic_python.path} ({got.aic_python.origin})")
    estimator = _aic_estimator(opts, got.silicon_rows, cases, echo)
    echo(
        f"{opts.system}: {len(cases)} rows priced with servelab ({mode} mode), "
        f"skipped: {sum(skipped.values())}"
    )
    for reason, n in sorted(skipped.items(), key=lambda kv: -kv[1]):
        echo(f"  skipped {n:4d}: {reason}")
    replayed = recipe_counts(cases)
    for engine, counts in replayed.items():
        echo(
            f"  {engine}: {counts.with_recipe} rows replayed with their InferenceX recipe's settings, "
            f"{counts.engine_defaults} with the engine's defaults (no recipe for their model and date)"
        )
    if opts.as_sent:
        sent = sum(1 for c in cases if c.settings is None and c.silicon_source)
        mixed = ", AIConfigurator's SGLang rows with --enable-mixed-chunk" if opts.aic_mixed_chunk else ""
        echo(
            f"  --as-sent: {sent} rows without a recipe replayed as their campaign's client sent them "
            f"(calibrate/clients.py: AIConfigurator's at the nominal lengths{mixed})"
        )

    before = errors_of(cases, {}, lambda c, p: price(c, documented[c.engine]), jobs, "defaults (in sample)")
    by_set = fit_param_sets(cases, start, price, opts.iters, jobs, echo=echo)
    engines = [e for e in ENGINES if any(c.engine == e for c in cases)]
    chosen = verdicts(engines, cases, before, {n: s["cv"]["rows"] for n, s in by_set.items()})
    fitted = {e: by_set[chosen[e].param_set]["fitted"][e] for e in engines}
    cv = _chosen_cv(cases, by_set, chosen)
    echo(f"fitted and cross-validated {len(by_set)} parameter sets ({time.time() - t0:.0f} s)")
    after = errors_of(
        cases, {}, lambda c, p: price(c, fitted.get(c.engine, start[c.engine])), jobs, "fitted (in sample)"
    )

    table = {
        "defaults (in sample)": _errors(*before),
        "fitted (in sample)": _errors(*after),
        "fitted, leave one family out": _errors(cv["ttft"], cv["tpot"]),
    }
    heads = ("n", "TTFT med", "TTFT p90", "TPOT med", "TPOT p90")
    echo(f"\n{'servelab on ' + opts.system:32s} {heads[0]:>5s} " + " ".join(f"{h:>9s}" for h in heads[1:]))
    for name, errors in table.items():
        echo(_row(name, errors))
    comparison = None
    if opts.aic and not got.silicon_rows:
        echo("--aic: no silicon_sample.csv rows among the sources: nothing to ask AIConfigurator about")
    elif opts.aic:
        comparison = _compare_with_aic(opts, got.silicon_rows, cases, cv, estimator, echo)
    else:
        echo(
            "AIConfigurator 0.12.0 (--aic to run it here): on the 307 of 480 H200 rows it answered, "
            "46.5% TTFT / 27.7% TPOT median error (docs/accuracy.md section 4, 2026-11-30)"
        )
    cv_by_family = {k: FamilyErrors.model_validate(v) for k, v in cv["by_family"].items()}
    cv_by_family_by_set = {
        n: {k: FamilyErrors.model_validate(v) for k, v in s["cv"]["by_family"].items()}
        for n, s in by_set.items()
    }
    echo("\nleave-one-family-out by engine/family (median TTFT / TPOT error), per parameter set:")
    for key, family in cv_by_family.items():
        cells = "  ".join(
            f"{sets[key].ttft.median:6.1%} {sets[key].tpot.median:6.1%}"
            for sets in cv_by_family_by_set.values()
        )
        echo(f"  {key:32s} n={family.ttft.n:4d}  {cells}  ({', '.join(by_set)})")
    echo("\nfitted parameters:")
    for engine, params in fitted.items():
        echo(f"  {engine:7s} " + "  ".join(f"{k}={v:.2f}" for k, v in params.items()))

    settings = Settings(
        system=opts.system,
        mode=mode,
        tables=opts.tables,
        prompts_per_concurrency=opts.prompts_per_concurrency,
        length_spread=opts.length_spread,
        as_sent=opts.as_sent,
        aic_mixed_chunk=opts.aic_mixed_chunk,
        loss=LOSS,
        cross_validation="leave one model family out (servelab.specs.families)",
    )
    made = provenance(" ".join([opts.program, *opts.argv]).strip(), got.sources, settings)
    entries = engine_entries(fitted, cases, opts.proposes_terms, chosen)
    for e, v in chosen.items():
        how = "kept" if v.kept else "not kept: no set's fit transfers to unseen model families"
        sets = ", ".join(f"{n} {score:.1%}" for n, score in v.set_scores.items())
        echo(
            f"  {e:7s} defaults {v.defaults_score:.1%} vs cross-validated fit "
            f"{v.cv_score:.1%} (set {v.param_set}; TTFT + TPOT medians and p90s; {sets}): {how}"
        )
    written = as_written_errors(cases, before, cv["rows"], chosen)
    label = "as written, out of sample"  # kept fits left one family out, the defaults elsewhere
    table[label] = _errors(*written)
    echo(_row(label, table[label]))
    defaults_vs_written = DefaultsVsWritten(
        defaults=_by_group(cases, before), as_written=_by_group(cases, written)
    )
    echo(
        f"\n{'defaults -> as written, by engine':32s} {heads[0]:>5s} "
        + " ".join(f"{h:>9s}" for h in heads[1:])
    )
    for key, d in defaults_vs_written.defaults.items():
        echo(_row(key, d) + "  ->  " + _cells(defaults_vs_written.as_written[key]))
    doc = CalibrationDocument(
        provenance_line=made.line(len(cases)),
        provenance=made,
        rows_used=len(cases),
        rows_skipped=skipped,
        recipe_settings=replayed,
        errors=table,
        cv_by_family=cv_by_family,
        param_sets={n: list(names) for n, names in PARAM_SETS.items()},
        cv_by_family_by_set=cv_by_family_by_set,
        aiconfigurator_same_rows=comparison,
        engines={e: fit for e, fit in entries.items() if chosen[e].kept},
        verdicts=chosen,
        defaults_vs_written=defaults_vs_written,
        fitted_not_kept={e: fit for e, fit in entries.items() if not chosen[e].kept},
    )
    if opts.report:
        written_params = {e: fitted[e] if chosen[Engine(e)].kept else documented[e] for e in engines}
        per_row = _per_row(cases, price, written_params, jobs, cv["predicted"], chosen)
        opts.report.write_text(json.dumps(per_row, indent=1))
    if opts.summary:
        doc.write(opts.summary)
    if not (opts.dry_run or opts.proposes_terms):
        # the out-of-sample residuals the serving-level bands are built from (calibrate/residuals.py)
        oos = out_of_sample_rows(cases, price, jobs, documented, cv["params"], chosen)
        doc.write(opts.out)
        write_residuals(residuals_path(opts.out), made, opts.out, oos)
        echo(f"\nwrote {opts.out} (predictions read it with --calibration {opts.out})")
        echo(f"wrote {residuals_path(opts.out)} ({len(oos)} rows' out-of-sample residuals)")
    echo(f"took {time.time() - t0:.0f} s")
    return doc


def _by_group(cases: list[Case], errors: tuple[np.ndarray, np.ndarray]) -> dict[str, Errors]:
    """The errors' medians and p90s per engine and per engine/family."""
    keys = sorted({c.engine for c in cases} | {f"{c.engine}/{c.family}" for c in cases})
    out = {}
    for key in keys:
        idx = [i for i, c in enumerate(cases) if key in (c.engine, f"{c.engine}/{c.family}")]
        out[key] = _errors(errors[0][idx], errors[1][idx])
    return out


def _chosen_cv(cases: list[Case], by_set: dict[str, dict], chosen: dict[Engine, Verdict]) -> dict:
    """The cross-validation of each engine's chosen parameter set, as one leave_one_family_out result."""
    sets = {e: by_set[v.param_set]["cv"] for e, v in chosen.items()}
    rows = {c.row_id: sets[c.engine]["rows"][c.row_id] for c in cases}
    errors = np.array([rows[c.row_id] for c in cases], dtype=float).reshape(-1, 2)
    return {
        "rows": rows,
        "predicted": {c.row_id: sets[c.engine]["predicted"][c.row_id] for c in cases},
        "by_family": {
            k: v for e, cv in sets.items() for k, v in cv["by_family"].items() if k.startswith(f"{e}/")
        },
        "params": {k: v for e, cv in sets.items() for k, v in cv["params"].items() if k.startswith(f"{e}/")},
        "ttft": errors[:, 0],
        "tpot": errors[:, 1],
    }


def _aic_estimator(
    opts: EngineFitOptions, rows: list[dict], cases: list[Case], echo: Echo
) -> aic.AicPython | None:
    """With --aic, the python that will ask AIConfigurator about the rows its cache lacks: found (or refused,
    in one line) before the fit rather than after it, and said."""
    if not (opts.aic and rows):
        return None
    ids = {r["id"] for r in rows}
    asked = [c.row_id for c in cases if c.row_id in ids]
    py = aic.estimator_for(asked, opts.system, opts.sources.aic_python)
    cache = aic.predictions_cache(opts.system)
    if py is None:
        echo(f"--aic: AIConfigurator's answers to all {len(asked)} rows are in {cache}; nothing runs")
    else:
        echo(
            f"--aic: AIConfigurator {aic.AIC_VERSION} run by {py.path} ({py.origin}); answers kept in {cache}"
        )
    return py


def _compare_with_aic(
    opts: EngineFitOptions,
    rows: list[dict],
    cases: list[Case],
    cv: dict,
    estimator: aic.AicPython | None,
    echo: Echo,
) -> AicComparison:
    by_id = {r["id"]: r for r in rows}
    cases = [c for c in cases if c.row_id in by_id]  # AIConfigurator is asked about its own rows only
    answers = aic.aic_predictions([by_id[c.row_id] for c in cases], opts.system, estimator)
    comparison = AicComparison.model_validate(aic.compare_with_aic(cases, answers, cv["rows"]))
    a, s_ = comparison.aiconfigurator, comparison.servelab_cv
    echo(_row(f"AIConfigurator {aic.AIC_VERSION} (same rows)", a))
    echo(_row("servelab CV on those rows", s_))
    echo(
        f"  AIConfigurator answered {comparison.answered} of {len(cases)} rows ({comparison.how}); "
        f"failures: {comparison.failures}"
    )
    echo(
        f"  ratio servelab / AIConfigurator median error: "
        f"TTFT {_ratio(s_.ttft, a.ttft)}, TPOT {_ratio(s_.tpot, a.tpot)}"
    )
    return comparison


def _ratio(a: ErrorSummary, b: ErrorSummary) -> str:
    return "n/a" if a.median is None or not b.median else f"{a.median / b.median:.2f}"


def recipe_counts(cases: list[Case]) -> dict[Engine, RecipeCounts]:
    """Per engine, the rows replayed with recipe settings (calibrate.recipes) and those at the defaults."""
    out: dict[Engine, RecipeCounts] = {}
    for c in cases:
        n = out.setdefault(Engine(c.engine), RecipeCounts())
        if c.settings:
            n.with_recipe += 1
        else:
            n.engine_defaults += 1
    return out


def _per_row(
    cases: list[Case],
    price: Pricer,
    written: dict,
    jobs: Jobs,
    cv_predicted: dict,
    chosen: dict[Engine, Verdict],
) -> list[dict]:
    """Each row's measured and predicted TTFT / TPOT: at the parameters the file is written with (a kept
    engine's fit, in sample; the documented defaults for the others), with the row's model family left out of
    the fit (`cv_predicted`, the engine's chosen parameter set), and as written out of sample (the left-out
    prediction where the fit is kept, the defaults' where not: the rows of "as written, out of sample")."""
    per_row = []
    rows = [(c, written[c.engine]) for c in cases]
    for c, (ttft, tpot) in zip(cases, price_rows(rows, price, jobs, "--report rows"), strict=True):
        cv_ttft, cv_tpot = cv_predicted[c.row_id]
        kept = chosen[Engine(c.engine)].kept
        per_row.append(
            {
                "id": c.row_id,
                "engine": c.engine,
                "family": c.family,
                "parallel": c.parallel.label(),
                "concurrency": c.concurrency,
                "isl": c.isl,
                "osl": c.osl,
                "ttft_ms": c.ttft_ms,
                "tpot_ms": c.tpot_ms,
                "pred_ttft_ms": ttft,
                "pred_tpot_ms": tpot,
                "family_left_out_ttft_ms": cv_ttft,
                "family_left_out_tpot_ms": cv_tpot,
                "as_written_ttft_ms": cv_ttft if kept else ttft,
                "as_written_tpot_ms": cv_tpot if kept else tpot,
                "note": c.note,
                "recipe": c.settings.recipe if c.settings else "",
            }
        )
    return per_row
