"""The `servelab` command: one thin module per command group, wired here.

Every command module is imported at start-up (even `--help` needs their options), so each keeps at its top
only what is cheap: typer, rich, the standard library and light helpers. Modules that build many pydantic
models or load specs at import (the recipe store and schema, model specs, the predictor) cost about 0.3 s
together; a command imports those when it runs (`# noqa: PLC0415` marks each such import).
"""

import contextlib
import errno
import os
import sys
import traceback
from importlib import metadata
from typing import NoReturn

import typer
from typer.core import TyperGroup

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
    run,
    sweep,
    systems,
)
from servelab.errors import ServelabError


class WholeHelpGroup(TyperGroup):
    """A group whose command list shows each command's first sentence whole, wrapped to the terminal: click
    cuts it with '...' where it passes the terminal's width (80 columns cut most of them)."""

    def format_commands(self, ctx, formatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


app = typer.Typer(
    cls=WholeHelpGroup,
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


app.add_typer(models.app, name="models", cls=WholeHelpGroup)
app.add_typer(systems.app, name="systems", cls=WholeHelpGroup)
app.command("memory")(memory.memory)
app.command("estimate")(estimate.estimate)
app.command("plan")(plan.plan)
app.add_typer(db.app, name="db", cls=WholeHelpGroup)
app.command("collect")(collect.collect)
app.command("bench", context_settings={"allow_interspersed_args": True})(bench.bench)
app.add_typer(recipes.app, name="recipes", cls=WholeHelpGroup)
app.command("sweep")(sweep.sweep)
app.add_typer(changelog.app, name="changelog", cls=WholeHelpGroup)
app.add_typer(results.app, name="results", cls=WholeHelpGroup)
app.command("report")(report.report)
app.command("run")(run.run)
app.add_typer(calibrate.app, name="calibrate", cls=WholeHelpGroup)


# a path the user gave that cannot be used: bad input (exit 2), not a run that failed
USER_PATH_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
USER_PATH_ERRNOS = (errno.ENAMETOOLONG, errno.ELOOP)
DEBUG_ENV = "SERVELAB_DEBUG"


def one_line(text: str) -> str:
    """Control characters (a newline in a value the user typed, an escape sequence) shown escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def fail(message: str, exit_code: int) -> NoReturn:
    """Print one `error:` line (after the traceback when SERVELAB_DEBUG is set) and exit."""
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        traceback.print_exc()
    print(f"error: {one_line(message)}", file=sys.stderr)
    sys.exit(exit_code)


def os_error_message(e: OSError) -> str:
    """'path: strerror' (both paths of a rename), as the operating system named the problem."""
    reason = e.strerror or type(e).__name__
    paths = [str(p) for p in (e.filename, e.filename2) if p is not None]
    return ": ".join([" -> ".join(paths), reason] if paths else [reason])


def quiet_broken_pipe() -> NoReturn:
    """The reader of stdout went away (`| head`): stop without a word, and keep Python's exit-time flush
    of stdout from raising again."""
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(1)


def main() -> None:
    """Run the CLI. Every failure is one `error:` line: bad input (a ServelabError, a usage error, a path
    that is missing, a directory or unreadable) exits 2, a run that failed exits 1, Ctrl-C exits 130; an
    unexpected exception is one line naming it, exit 1 (SERVELAB_DEBUG=1 shows the traceback)."""
    try:
        result = app(standalone_mode=False)
    except ServelabError as e:
        fail(e.flag_message(), e.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        quiet_broken_pipe()
    except USER_PATH_ERRORS as e:
        fail(os_error_message(e), 2)
    except Exception as e:
        if type(e).__name__ == "Abort":  # Ctrl-C as the CLI library reports it
            print("interrupted", file=sys.stderr)
            sys.exit(130)
        # usage errors (typer's own click, vendored or not)
        if hasattr(e, "show") and hasattr(e, "exit_code"):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, OSError) and e.errno in USER_PATH_ERRNOS:
            fail(os_error_message(e), 2)
        if isinstance(e, OSError) and e.filename is not None:  # the disk is full, a file system is read-only
            fail(os_error_message(e), 1)
        hint = f"set {DEBUG_ENV}=1 for the traceback; please report it"
        fail(f"internal error: {type(e).__name__}: {e} ({hint})", 1)
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
