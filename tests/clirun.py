"""`servelab ARGS` run in the test's own process, answering as `subprocess.run` does (returncode, stdout,
stderr): the console script's `main()` with its one error path, without a fresh interpreter and its imports
(0.3-0.6 s a call on the 2-core machine). A few tests keep a real process, for what only one shows: the
console script itself, signals, bytes that are not UTF-8 in argv, file descriptors a child inherits.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from servelab.cli import main as cli_main


class Captured(io.TextIOWrapper):
    """A text stream with a binary buffer underneath (some writers use sys.stdout.buffer), read back after;
    not a terminal, as a pipe to a parent is not."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)

    def text(self) -> str:
        self.flush()
        return self.buffer.getvalue().decode("utf-8", "backslashreplace")  # type: ignore[attr-defined]

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def environment(env: dict[str, str] | None, cwd: Path | str | None) -> Iterator[None]:
    """os.environ replaced by `env` (when given, as subprocess's env= replaces it) and the working directory
    moved to `cwd`, both put back after."""
    saved_env, saved_cwd = dict(os.environ), Path.cwd()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)


def in_process(
    args: list[str], env: dict[str, str] | None = None, cwd: Path | str | None = None
) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `servelab ARGS` through `servelab.cli.main.main`."""
    out, err = Captured(), Captured()
    code: int | str | None = 0
    with environment(env, cwd):
        old = sys.argv, sys.stdin, sys.stdout, sys.stderr
        sys.argv, sys.stdin = ["servelab", *args], io.StringIO()
        sys.stdout, sys.stderr = out, err
        try:
            cli_main.main()
        except SystemExit as e:
            code = e.code
        finally:
            sys.argv, sys.stdin, sys.stdout, sys.stderr = old
    if code is None:
        code = 0
    if not isinstance(code, int):  # sys.exit("message") prints the message and exits 1
        err.write(f"{code}\n")
        code = 1
    return code, out.text(), err.text()


def servelab(
    *args: str | Path, cwd: Path | str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`servelab ARGS` as `subprocess.run(..., capture_output=True, text=True)` answers it, in-process."""
    argv = [str(a) for a in args]
    code, out, err = in_process(argv, env=env, cwd=cwd)
    return subprocess.CompletedProcess(["servelab", *argv], code, out, err)
