"""The one exception type that reaches users as a one-line message (exit code 2), never a traceback."""


class ServelabError(Exception):
    """Bad input or an impossible request; the message names the field or file and what was expected."""

    exit_code = 2


def closest(name: str, choices: list[str], n: int = 3) -> str:
    """A ' (did you mean ...?)' suffix naming the closest known names, or an empty string."""
    import difflib

    matches = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=n, cutoff=0.5)
    by_lower = {c.lower(): c for c in choices}
    return f" (did you mean {', '.join(by_lower[m] for m in matches)}?)" if matches else ""
