"""`servelab calibrate`: fit engine profiles (a calibration file; ./calibrated.json by default) and
a system's roofline efficiencies (perfdb/data/efficiencies.json). Thin: parse flags into options, call
servelab.calibrate."""

import sys
from pathlib import Path

import typer

from servelab.calibrate.engines import DEFAULT_OUT, EngineFitOptions, calibrate_engines
from servelab.calibrate.params import TTFT_TERMS
from servelab.calibrate.price import LENGTH_SPREAD, MODES, PROMPTS_PER_CONCURRENCY
from servelab.calibrate.roofline import fit_roofline, write_efficiencies
from servelab.calibrate.sources import Sources
from servelab.cli._common import Col, JsonOpt, print_json, print_table
from servelab.errors import ServelabError
from servelab.userfiles import refuse_overwriting_inputs

app = typer.Typer(no_args_is_help=True, help="Fit engine profiles and roofline efficiencies to measurements.")


def _echo(line: str) -> None:
    print(line, flush=True)


def _note(line: str) -> None:
    """With --json, the progress lines go to stderr: stdout is the JSON document alone."""
    print(line, file=sys.stderr, flush=True)


def _ttft_terms(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    names = list(TTFT_TERMS) if value == "all" else value.split(",")
    unknown = [n for n in names if n not in TTFT_TERMS]
    if unknown:
        raise ServelabError(
            f"--ttft-terms: unknown {', '.join(unknown)}; expected all or some of {', '.join(TTFT_TERMS)}"
        )
    return tuple(names)


def _argv(group: str) -> tuple[str, ...]:
    """The arguments after `calibrate GROUP`, recorded in the written file as the command that made it."""
    args = sys.argv[1:]
    at = next((i for i in range(len(args) - 1) if args[i : i + 2] == ["calibrate", group]), None)
    return tuple(args[at + 2 :]) if at is not None else ()


@app.command()
def engines(
    system: str = typer.Option("h200_sxm", "--system", help="System whose measurements are fitted."),
    mode: str = typer.Option(
        "auto", "--mode", help=f"{', '.join(MODES)}: auto prices rows with the aggregated simulator."
    ),
    iters: int = typer.Option(
        300,
        "--iters",
        min=1,
        max=100_000,
        help="Nelder-Mead iterations per fit (on the linearized predictor)",
    ),
    csv: Path | None = typer.Option(
        None,
        "--csv",
        help="fit on this silicon_sample.csv (AIConfigurator's format) instead of the package's",
    ),
    aic_sample: bool = typer.Option(
        False,
        "--aic-sample",
        help="also fit on AIConfigurator's pinned silicon_sample.csv (the default with no source named)",
    ),
    aic_python: Path | None = typer.Option(
        None,
        "--aic-python",
        metavar="PATH",
        help="the python of an environment that has AIConfigurator 0.12.0, for its sample and --aic "
        "(default: this environment, with pip install 'servelab[aic]'); servelab installs nothing",
    ),
    from_store: str | None = typer.Option(
        None,
        "--from-store",
        help="fit on the measured bench rows of this results store (rows naming their deployment): an "
        "SQLite file or a postgresql:// URL",
    ),
    from_inferencex: list[Path] = typer.Option(
        None,
        "--from-inferencex",
        help="fit on InferenceX result files (utils/process_result.py rows): a file or folder; repeatable",
    ),
    limit: int = typer.Option(
        0, "--limit", min=0, help="fit on at most this many rows per engine (quick runs)"
    ),
    prompts_per_concurrency: int = typer.Option(
        PROMPTS_PER_CONCURRENCY,
        "--prompts-per-concurrency",
        min=0,
        max=10_000,
        help="replay each row as a closed-loop run of this many prompts per concurrency slot from an idle "
        "engine (0: the simulator's steady state)",
    ),
    length_spread: float = typer.Option(
        LENGTH_SPREAD,
        "--length-spread",
        help="closed-loop request lengths drawn from U[1-s, 1+s] x the row's (0: identical requests)",
    ),
    as_sent: bool = typer.Option(
        False,
        "--as-sent",
        help="replay silicon_sample.csv rows that no recipe covers as their campaign's client sent them "
        "(AIConfigurator's own rows at the nominal lengths) instead of with --length-spread",
    ),
    aic_mixed_chunk: bool = typer.Option(
        False,
        "--aic-mixed-chunk",
        help="with --as-sent, also replay AIConfigurator's own SGLang rows with --enable-mixed-chunk (a "
        "what-if: the rows do not say)",
    ),
    ttft_terms: str | None = typer.Option(
        None,
        "--ttft-terms",
        metavar="NAMES",
        help="also fit per-request TTFT terms the step model lacks: all, or a comma list of "
        f"{', '.join(TTFT_TERMS)} (reports what they would buy; never writes calibrated.json)",
    ),
    kernel_terms: bool = typer.Option(
        False,
        "--kernel-terms",
        help="also fit a kernel-time factor per op family (attention, comm, MoE, GEMM) per engine "
        "(reports what they would buy; never writes calibrated.json)",
    ),
    tables: str = typer.Option(
        "own",
        "--tables",
        help="own: each engine's own tables, the roofline where it has none (what servelab does); "
        "torch: the torch backend's tables for every engine (what servelab did before)",
    ),
    summary: Path | None = typer.Option(
        None, "--summary", help="write the summary (errors, parameters) as JSON here"
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="report, write nothing (it says which AIConfigurator it reads)"
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help=f"the calibration file to write (default: {DEFAULT_OUT} in the working directory, never the "
        "installed package's; predictions read it with --calibration FILE)",
        show_default=False,
    ),
    report: Path | None = typer.Option(
        None, "--report", help="write the per-row predictions and errors as JSON here"
    ),
    aic: bool = typer.Option(
        False,
        "--aic",
        help="also run AIConfigurator's own estimate of its sample's rows (about 1-4 s a row; cached)",
    ),
    jobs: int = typer.Option(
        1,
        "--jobs",
        help="price rows in this many processes (0: one per core); the results do not depend on it",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Fit each engine's overhead parameters on measured end-to-end TTFT / TPOT (AIConfigurator's
    silicon_sample.csv, InferenceX results, the results store, or any mix), cross-validated leaving one model
    family out; write the fits that transfer to a versioned calibration file."""
    refuse_overwriting_inputs(
        {"--out": None if dry_run else out, "--summary": summary, "--report": report},
        {"--csv": csv, "--from-inferencex": from_inferencex, "--aic-python": aic_python},
        stores={"--from-store": from_store},
    )
    if mode not in MODES:
        raise ServelabError(f"--mode: {mode}; expected one of {', '.join(MODES)}")
    if tables not in ("own", "torch"):
        raise ServelabError(f"--tables: {tables}; expected own or torch")
    if not 0 <= length_spread < 1:  # also refuses nan
        raise ServelabError(f"--length-spread: {length_spread}; expected a fraction in [0, 1)")
    if aic_mixed_chunk and not as_sent:
        raise ServelabError("--aic-mixed-chunk: replays rows as sent, so it needs --as-sent")
    echo = _note if as_json else _echo
    if out is None and not dry_run:
        out = Path(DEFAULT_OUT)
        echo(f"note: no --out: the fit goes to {out.resolve()} (predict with --calibration {out})")
    opts = EngineFitOptions(
        system=system,
        mode=mode,
        iters=iters,
        sources=Sources(
            aic_sample=aic_sample,
            csv=csv,
            aic_python=aic_python,
            store=from_store,
            inferencex=tuple(from_inferencex or ()),
        ),
        limit=limit,
        prompts_per_concurrency=prompts_per_concurrency,
        length_spread=length_spread,
        as_sent=as_sent,
        aic_mixed_chunk=aic_mixed_chunk,
        ttft_terms=_ttft_terms(ttft_terms),
        kernel_terms=kernel_terms,
        tables=tables,
        summary=summary,
        dry_run=dry_run,
        out=out or Path(DEFAULT_OUT),
        report=report,
        aic=aic,
        jobs=jobs,
        argv=_argv("engines"),
    )
    doc = calibrate_engines(opts, echo=echo)
    if as_json:
        print_json("servelab.calibration", {"calibration": doc.dump()})


@app.command()
def roofline(
    system: str = typer.Option("h200_sxm", "--system", help="System whose measurements are fitted."),
    tables: Path | None = typer.Option(
        None, "--tables", help="table directory (default: the one servelab uses for the system)"
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the fit, do not write efficiencies.json"),
    as_json: bool = JsonOpt,
) -> None:
    """Fit a system's roofline efficiencies to its collected perf tables; print the fit and write it to
    efficiencies.json."""
    name, entry = fit_roofline(
        system, tables, argv=_argv("roofline"), note=lambda line: print(line, file=sys.stderr)
    )
    if as_json:
        print_json("servelab.roofline", {"system": name, "fit": entry})
    else:
        _print_roofline(name, entry)
    if not dry_run:
        write_efficiencies(name, entry)
        print(f"wrote efficiencies.json for {name}", file=sys.stderr)


def _print_roofline(name: str, entry: dict) -> None:
    gemm = entry["gemm_compute"]
    fitted = [
        ("GEMM bf16 (fraction of peak)", f"{gemm['bf16']:.3f}"),
        ("GEMM fp8 (fraction of peak)", f"{gemm['fp8']:.3f}"),
        ("attention (fraction of peak)", f"{entry['attention_compute']:.3f}"),
        ("HBM (fraction of peak)", f"{entry['memory']:.3f}"),
        ("kernel floor (us)", f"{entry['kernel_us']:.2f}"),
        ("band (measured / roofline, p10-p90)", f"{entry['band_low']:.3f}-{entry['band_high']:.3f}"),
    ]
    print_table([Col("parameter", key=True), Col("fitted", "right", key=True)], fitted, f"{name} roofline")
    prov = entry["_provenance"]
    errors = [
        (
            family,
            "fitted" if kind == "" else "reported",
            f"{before:.3f}",
            f"{prov[f'{kind}median_abs_log_error_after'][family]:.3f}",
        )
        for kind in ("", "not_fitted_")
        for family, before in prov[f"{kind}median_abs_log_error_before"].items()
    ]
    columns = [Col("family", key=True), Col("role"), Col("before", "right"), Col("after", "right")]
    print_table(columns, errors, "median |log(measured / roofline)| per family")
