"""The `servelab` command: one thin module per command group (servelab.cli.commands says where each is).

The root imports no command module: `servelab --version` and `--help` pay only for Python and typer, and a
command imports its own module when it runs. `app` (every command registered, for tests and typer's tools)
is built on first use. Each command module keeps at its top only what is cheap: typer, the standard library
and light helpers (rich only where the command always prints with it; the shared helpers import it when they
print, so a --json answer pays nothing for it); modules that build many pydantic models or load specs at
import (the recipe store and schema, model specs, the predictor) are imported when a command runs
(`# noqa: PLC0415`).
"""

import contextlib
import errno
import os
import sys
import traceback
from functools import cache
from typing import NoReturn

import typer

from servelab.cli.commands import COMMANDS, LazyRoot, new_app, register
from servelab.cli.entry import version_line
from servelab.errors import ServelabError


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit()


def _root(
    _: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Options of `servelab` itself (the help text is the app's)."""


def root_app() -> typer.Typer:
    """The root command with no command module imported: each is built when it runs."""
    root = new_app(LazyRoot)
    root.callback()(_root)
    return root


@cache
def full_app() -> typer.Typer:
    """The root command with every command registered (each module imported)."""
    full = root_app()
    for name in COMMANDS:
        register(full, name)
    return full


def __getattr__(name: str) -> typer.Typer:
    if name == "app":
        return full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def main(app: typer.Typer | None = None) -> None:
    """Run the CLI (`app`; by default the lazy root). Every failure is one `error:` line: bad input (a
    ServelabError, a usage error, a path that is missing, a directory or unreadable) exits 2, a run that
    failed exits 1, Ctrl-C exits 130; an unexpected exception is one line naming it, exit 1
    (SERVELAB_DEBUG=1 shows the traceback)."""
    try:
        result = (app or root_app())(standalone_mode=False)
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
        if isinstance(e, UnicodeEncodeError) and e.reason == "surrogates not allowed":
            # bytes of another encoding in an argument or a file name, reaching what takes only UTF-8
            fail(f"{e.object[:200]!r}: not valid UTF-8", 2)
        if isinstance(e, OSError) and e.errno in USER_PATH_ERRNOS:
            fail(os_error_message(e), 2)
        if isinstance(e, OSError) and e.filename is not None:  # the disk is full, a file system is read-only
            fail(os_error_message(e), 1)
        hint = f"set {DEBUG_ENV}=1 for the traceback; please report it"
        fail(f"internal error: {type(e).__name__}: {e} ({hint})", 1)
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
