"""`servelab results`: list, show, compare, export, import and push the runs kept in the results store."""

import dataclasses
import io
import json
import statistics
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from servelab.cli._common import (
    CalibrationOpt,
    Col,
    CsvOpt,
    JsonOpt,
    plain,
    print_json,
    print_table,
    printable,
)
from servelab.errors import ServelabError
from servelab.readable import given_width, number
from servelab.results import compare as comparing
from servelab.results.export import FORMATS, metric_rows, run_record, write_csv, write_parquet
from servelab.results.importers import import_files
from servelab.results.location import server_url, shown
from servelab.results.push import push as push_runs
from servelab.results.store import Store, default_path
from servelab.userfiles import refuse_overwriting_inputs

app = typer.Typer(
    no_args_is_help=True, help="The results store: list, show, compare, export, import, push runs."
)

StoreOpt = typer.Option(
    None,
    "--store",
    help=f"The results store: an SQLite file (default {default_path()}) or a PostgreSQL URL "
    "(postgresql://user@host:port/db, with pip install 'servelab[postgres]').",
    show_default=False,
)


def _console() -> Console:
    """Piped output fits COLUMNS when it is set, else keeps whole cells (rich would cut a table to 80 columns
    when stdout is not a terminal)."""
    return Console() if sys.stdout.isatty() else Console(width=given_width() or 400)


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return number(value)


@app.command("list")
def list_runs(
    name: str = typer.Option(None, "--name", help="Only runs with this name.", show_default=False),
    limit: int = typer.Option(
        50, "--limit", min=0, max=1_000_000, help="At most this many, newest first (0: all)."
    ),
    store_path: str | None = StoreOpt,
    as_json: bool = JsonOpt,
    as_csv: bool = CsvOpt,
) -> None:
    """The runs in the store, newest first."""
    with Store.open(store_path) as store:
        runs = store.list_runs(name=name, limit=limit or None)
        counts = store.metric_counts()
    if as_json:
        runs_out = [dataclasses.asdict(r) | {"num_metrics": counts.get(r.id, 0)} for r in runs]
        print_json("servelab.results.runs", {"runs": runs_out})
        return
    if not runs and not as_csv:
        typer.echo(
            printable(f"no runs in {store.location}" + (f" named {name!r}" if name is not None else ""))
        )
        return
    columns = (
        Col("run", key=True),
        Col("name", key=True),
        Col("started", drop=2),
        Col("outcome", key=True),
        Col("metrics", "right", drop=3),
        Col("gpu", drop=1),
        Col("host", drop=4),
    )
    rows = [
        (r.id, r.name, r.started_at or "", r.outcome, str(counts.get(r.id, 0)), r.provenance.gpu or "")
        + (r.provenance.host or "",)
        for r in runs
    ]
    print_table(columns, rows, as_csv=as_csv)


@app.command()
def show(
    run: str = typer.Argument(..., help="Run id, or a unique prefix of it."),
    store_path: str | None = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """One run: provenance, stages, and its metrics (the median over repetitions, with their count)."""
    with Store.open(store_path) as store:
        record = run_record(store, store.get_run(run))
    if as_json:
        print_json("servelab.results.run", record)
        return
    console = _console()
    fields = {k: v for k, v in record.items() if k not in ("provenance", "stages", "metrics")}
    fields |= {k: v for k, v in record["provenance"].items() if v not in (None, [], {})}
    for k, v in fields.items():
        if v is not None:
            console.print(plain(f"{k:<20} {json.dumps(v) if isinstance(v, list | dict) else v}"))
    stages = Table("stage", "config", "rep", "status", "started", "ended", "artifact", title="stages")
    for s in record["stages"]:
        stages.add_row(
            *map(
                plain,
                (
                    s["stage"],
                    s["config"],
                    str(s["repetition"]),
                    s["status"],
                    s["started_at"] or "",
                    s["ended_at"] or "",
                    s["artifact"] or "",
                ),
            )
        )
    console.print(stages)
    values: dict[tuple[str, str, str, str], list[float]] = {}
    for m in record["metrics"]:
        values.setdefault((m["stage"], m["config"], m["name"], m["unit"]), []).append(m["value"])
    metrics = Table("stage", "config", "metric", "value", "unit", "n", title="metrics")
    for (stage, config, name, unit), vals in values.items():
        numbers = [v for v in vals if v is not None]
        median = statistics.median(numbers) if numbers else None
        metrics.add_row(*map(plain, (stage, config, name, _fmt(median), unit, str(len(vals)))))
    console.print(metrics)


@app.command()
def compare(
    a: str = typer.Argument(..., help="Side A (the baseline): a run id, or a name for all runs with it."),
    b: str = typer.Argument(
        None, help="Side B: a run id, or a name for all runs with it.", show_default=False
    ),
    predicted: str = typer.Option(
        None,
        "--predicted",
        help="Show A (measured) against this predicted run (an imported twin result): error in %.",
        show_default=False,
    ),
    twin: bool = typer.Option(
        False,
        "--twin",
        help="Show A (measured) against its twin: a predicted run of the same name, else simulated now "
        "from A's server command and GPU.",
    ),
    calibration: Path = CalibrationOpt,
    metric: list[str] = typer.Option(
        None, "--metric", "-m", help="Only metrics matching this glob (repeatable), e.g. '*ttft*'."
    ),
    store_path: str | None = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Metrics of A and B side by side: medians, change in %, Welch's t-test p-value (with repetitions). With
    --predicted or --twin: predicted against measured, error in %."""
    if (predicted is not None) + twin + (b is not None) != 1:
        raise ServelabError("compare: give B, or --predicted RUN, or --twin (one of them)")
    if calibration is not None and not twin:
        raise ServelabError("--calibration: prices the twin; use it with --twin")
    if b is None:
        _compare_predicted(a, predicted, calibration, metric or [], store_path, as_json)
        return
    with Store.open(store_path) as store:
        result = comparing.compare(store, a, b, metric or [])
    if as_json:
        print_json(
            "servelab.results.compare",
            {
                "a": [r.id for r in result.runs_a],
                "b": [r.id for r in result.runs_b],
                "rows": [dataclasses.asdict(row) for row in result.rows],
                "only_a": result.only_a,
                "only_b": result.only_b,
            },
        )
        return
    table = Table()
    for header in ("stage", "config", "metric", "unit", f"A ({a})", "n", f"B ({b})", "n", "change %", "p"):
        table.add_column(plain(header))  # A and B are what the user named
    for row in result.rows:
        cells = (
            row.stage,
            row.config,
            row.metric,
            row.unit,
            _fmt(row.median_a),
            str(len(row.a)),
            _fmt(row.median_b),
            str(len(row.b)),
            "-" if row.change_pct is None else f"{row.change_pct:+.1f}",
            "-" if row.p_value is None else "<0.001" if row.p_value < 0.001 else number(row.p_value, 3),
        )
        table.add_row(*map(plain, cells))
    console = _console()
    console.print(table)
    if result.only_a or result.only_b:
        console.print(plain(f"not compared: {result.only_a} metrics only in A, {result.only_b} only in B"))


def _compare_predicted(
    measured: str,
    predicted: str | None,
    calibration: Path | None,
    patterns: list[str],
    store_path: str | None,
    as_json: bool,
) -> None:
    from servelab.results import predicted as against  # noqa: PLC0415  # start-up time: loads the simulator

    with Store.open(store_path) as store:
        if predicted is not None:
            result = against.against_run(store, measured, predicted, patterns)
        else:
            result = against.against_twin(store, measured, patterns, calibration)
    if as_json:
        print_json("servelab.results.predicted", dataclasses.asdict(result))
        return
    table = Table(
        "config",
        "metric",
        "unit",
        "predicted",
        "measured",
        "error %",
        title=plain(f"run {result.measured} (measured) against {result.predicted_by} (predicted)"),
    )
    for row in result.rows:
        error = "-" if row.error_pct is None else f"{row.error_pct:+.1f}"
        cells = (row.config, row.metric, row.unit, _fmt(row.predicted), _fmt(row.measured), error)
        table.add_row(*map(plain, cells))
    _console().print(table)


@app.command()
def export(
    runs: list[str] = typer.Argument(None, help="Run ids or names (default: every run).", show_default=False),
    fmt: str = typer.Option("csv", "--format", "-f", help="csv | json | parquet."),
    output: Path = typer.Option(
        None,
        "--output",
        "-o",
        help="File to write (default: stdout; parquet needs a file).",
        show_default=False,
    ),
    store_path: str | None = StoreOpt,
    as_json: bool = typer.Option(False, "--json", help="Report what was written as JSON (with --output)."),
) -> None:
    """CSV or Parquet: one row per metric value with its run; JSON: whole runs with provenance and stages."""
    if fmt not in FORMATS:
        raise ServelabError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "parquet" and output is None:
        raise ServelabError("--format parquet writes a file: give --output FILE.parquet")
    refuse_overwriting_inputs({"--output": output}, {}, stores={"--store": store_path or default_path()})
    with Store.open(store_path) as store:
        selected = [r for ref in runs for r in store.find_runs(ref)] if runs else store.list_runs()
        rows = metric_rows(store, selected)
        records = [run_record(store, r) for r in selected] if fmt == "json" else []
    if fmt == "parquet":
        write_parquet(rows, output)
    else:
        text = io.StringIO()
        if fmt == "csv":
            write_csv(rows, text)
        else:
            text.write(json.dumps(records, indent=2) + "\n")
        if output is None:
            sys.stdout.write(text.getvalue())
            return
        output.write_text(text.getvalue())
    summary = {"output": str(output), "format": fmt, "runs": len(selected), "rows": len(rows)}
    if as_json:
        print_json("servelab.results.export", summary)
    else:
        typer.echo(printable(f"wrote {len(rows)} metric values of {len(selected)} runs to {output} ({fmt})"))


@app.command("import")
def import_(
    files: list[Path] = typer.Argument(
        ..., help="vllm bench serve / servelab bench result JSON, InferenceX JSON."
    ),
    name: str = typer.Option(
        None,
        "--name",
        help="Run name (default: the model id, or InferenceX's model-hw-framework-precision).",
        show_default=False,
    ),
    store_path: str | None = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Import result files, one run per file (per name in a list file); a file imported before is skipped."""
    with Store.open(store_path) as store:
        imported = import_files(store, files, name)
    if as_json:
        print_json("servelab.results.import", {"imported": [dataclasses.asdict(i) for i in imported]})
        return
    for i in imported:
        if i.new:
            typer.echo(printable(f"imported {i.path} as run {i.run_id} ({i.name}, {i.num_metrics} metrics)"))
        else:
            typer.echo(printable(f"skipped {i.path}: already imported as run {i.run_id} ({i.name})"))


@app.command()
def push(
    runs: list[str] = typer.Argument(None, help="Run ids or names (default: every run).", show_default=False),
    to: str = typer.Option(
        ...,
        "--to",
        help="The store to copy into: a PostgreSQL URL (postgresql://user@host:port/db) or an SQLite file.",
        show_default=False,
    ),
    store_path: str | None = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Copy runs of this store into another (a team's shared PostgreSQL store): each run whole, those the
    target has already left as they are (pushing twice copies nothing), runs still running left for later."""
    target_url = server_url(to, "to")
    target_name = shown(target_url) if target_url else to
    with Store.open(store_path) as source:
        selected = [r for ref in runs for r in source.find_runs(ref)] if runs else source.list_runs()
        with Store.open(to) as target:
            pushed = push_runs(source, target, selected)
    if as_json:
        print_json("servelab.results.push", {"to": target_name, **dataclasses.asdict(pushed)})
        return
    line = f"pushed to {target_name}: {len(pushed.copied)} copied, {len(pushed.present)} already there"
    if pushed.running:
        line += f", {len(pushed.running)} still running (push them when they end)"
    typer.echo(printable(line))
