"""The `servelab` console script. `servelab --version` is answered here, before typer (about 60 ms of
imports, most of that command's time) is loaded; anything else goes to the CLI (servelab.cli.main)."""

import sys

from servelab import __version__


def version_line() -> str:
    """What `servelab --version` prints: servelab's version (pyproject.toml's; a test keeps them equal)."""
    return f"servelab {__version__}"


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        print(version_line())
        return
    from servelab.cli.main import main as cli_main  # noqa: PLC0415 - typer and the CLI only past --version

    cli_main()
