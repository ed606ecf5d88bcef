"""This folder's scripts' rule for bad input: one line naming what was wrong, on stderr, and exit status 2."""

import sys
from collections.abc import Callable

from servelab.errors import ServelabError


def one_line_on_bad_input(run: Callable[[], int]) -> int:
    """run()'s exit status; a ServelabError it raises is printed as one line, and the status is 2."""
    try:
        return run()
    except ServelabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
