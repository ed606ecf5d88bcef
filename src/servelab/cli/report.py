"""`servelab report`: one self-contained HTML page of benchmark results (files, stored runs, predictions)."""

import dataclasses
from pathlib import Path

import typer

from servelab.cli._common import JsonOpt, print_json
from servelab.errors import ServelabError
from servelab.userfiles import refuse_overwriting_inputs


def report(
    files: list[Path] = typer.Argument(
        None,
        help="Result files (servelab bench --save-result, vllm bench serve, InferenceX).",
        show_default=False,
    ),
    output: Path = typer.Option(..., "-o", "--output", help="The HTML file to write.", show_default=False),
    runs: list[str] = typer.Option(
        None, "--run", help="A stored run by id, id prefix or name (repeatable).", show_default=False
    ),
    store_path: str | None = typer.Option(
        None,
        "--store",
        help="The results store for --run (an SQLite file or a postgresql:// URL); default the user's.",
        show_default=False,
    ),
    predicted: list[Path] = typer.Option(
        None,
        "--predicted",
        help="servelab plan --json or estimate --mode agg --json output, or a simulated result (repeatable).",
        show_default=False,
    ),
    gpus: int = typer.Option(
        None,
        "--gpus",
        min=1,
        help="GPUs behind results that do not say (for tok/s per GPU).",
        show_default=False,
    ),
    title: str = typer.Option("servelab report", "--title", help="The page's title."),
    as_json: bool = JsonOpt,
) -> None:
    """One HTML page: latency CDFs, TTFT / TPOT / throughput against concurrency or rate, the Pareto front,
    predicted against measured. plotly.js is inlined: the page opens offline."""
    # the library (plotly, the store, the predictor's Pareto rule) loads only when the command runs
    from servelab.results.report import predicted_points, render_html, result_points, store_points  # noqa: PLC0415
    from servelab.results.store import Store, default_path  # noqa: PLC0415 - as above

    refuse_overwriting_inputs(
        {"--output": output},
        {"FILES": files, "--predicted": predicted},
        stores={"--store": (store_path or default_path()) if runs else None},
    )
    points = [p for f in files or [] for p in result_points(f, gpus=gpus)]
    if runs:
        with Store.open(store_path) as store:
            points += [p for ref in runs for p in store_points(store, ref, gpus)]
    points += [p for f in predicted or [] for p in predicted_points(f, gpus)]
    page = render_html(points, title)
    try:
        output.write_text(page, encoding="utf-8")
    except OSError as e:
        raise ServelabError(f"{output}: cannot write ({e.strerror})", field="output") from e
    if as_json:  # the points the page shows, without their per-request samples
        rows = [{k: v for k, v in dataclasses.asdict(p).items() if k != "samples_ms"} for p in points]
        print_json("servelab.report", {"report": str(output), "points": rows})
        return
    typer.echo(f"report: {output} ({len(points)} points)")
