"""The `servelab` command: one thin module per command group, wired here.

Every command module is imported at start-up (even `--help` needs their options), so each keeps at its top
only what is cheap: typer, rich, the standard library and light helpers. Modules that build many pydantic
models or load specs at import (the recipe store and schema, model specs, the predictor) cost about 0.3 s
together; a command imports those when it runs (`# noqa: PLC0415` marks each such import).
"""

import sys
from importlib import metadata

import typer

from servelab import __version__
from servelab.cli import (
    bench,
    calibrate,
    changelog,
    collect,
    db,
    estimate,
    memory,
    models,
    plan,
    recipes,
    report,
    results,
    sweep,
    systems,
)
from servelab.errors import ServelabError

app = typer.Typer(
    name="servelab",
    help="LLM-serving performance: predict, collect per-op tables, benchmark servers, keep recipes.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    # click's plain help: option names are never cut (rich's boxed panels cut them at 80 columns) and flags
    # show no value type (rich's show `--json <bool>`)
    rich_markup_mode=None,
)


def version() -> str:
    """The installed distribution's version; the source tree's when it runs uninstalled (PYTHONPATH)."""
    try:
        return metadata.version("servelab")
    except metadata.PackageNotFoundError:
        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"servelab {version()}")
        raise typer.Exit()


@app.callback()
def _root(
    _: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Options of `servelab` itself (the help text is the app's)."""


app.add_typer(models.app, name="models")
app.add_typer(systems.app, name="systems")
app.command("memory")(memory.memory)
app.command("estimate")(estimate.estimate)
app.command("plan")(plan.plan)
app.add_typer(db.app, name="db")
app.command("collect")(collect.collect)
app.command("bench", context_settings={"allow_interspersed_args": True})(bench.bench)
app.add_typer(recipes.app, name="recipes")
app.command("sweep")(sweep.sweep)
app.add_typer(changelog.app, name="changelog")
app.add_typer(results.app, name="results")
app.command("report")(report.report)
app.add_typer(calibrate.app, name="calibrate")


def main() -> None:
    """Commands may return an exit code; bad input is one line and exit code 2, never a traceback."""
    try:
        result = app(standalone_mode=False)
    except ServelabError as e:
        print(f"error: {e.flag_message()}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:
        if type(e).__name__ == "Abort":  # Ctrl-C as the CLI library reports it
            print("interrupted", file=sys.stderr)
            sys.exit(130)
        if hasattr(e, "show") and hasattr(
            e, "exit_code"
        ):  # usage errors (typer's own click, vendored or not)
            e.show()
            sys.exit(e.exit_code)
        raise
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
