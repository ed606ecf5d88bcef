"""The one exception type that reaches users as a one-line message (exit code 2), never a traceback."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class ServelabError(Exception):
    """Bad input or an impossible request; the message names the field or file and what was expected.

    Library code names input fields in domain terms (`field="kv_dtype"`); only the CLI turns a field into the
    option that sets it (`--kv-dtype`), through `flag_message`.
    """

    exit_code = 2

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message

    def flag_message(self, flags: Mapping[str, str] | None = None) -> str:
        """The message with its field named as the command-line option that sets it."""
        if not self.field:
            return self.message
        flag = (flags or {}).get(self.field) or "--" + self.field.replace("_", "-")
        return f"{flag}: {self.message}"

    @classmethod
    def from_validation(
        cls,
        err: ValidationError,
        source: str = "",
        *,
        as_options: bool = False,
        flags: Mapping[str, str] | None = None,
    ) -> ServelabError:
        """One line naming each invalid field and what it expected: 'source: a.b: message; c: message'.

        With `as_options`, fields are named as the command-line options that set them ('--max-conc: ...'):
        for the CLI, whose option names are the field names hyphenated, except where `flags` names another.
        """
        parts = []
        for e in err.errors():
            # A mapping key from the input can hold anything; repr keeps the message on one line.
            loc = [str(x) if str(x).isprintable() else repr(x) for x in e["loc"]]
            field = ".".join(loc)
            if as_options and loc:
                # a list index (the second value of a repeated option) is not part of the option's name
                named = [x for x in loc if not x.isdigit()]
                field = (flags or {}).get(field) or "--" + "-".join(named).replace("_", "-")
            msg = e["msg"].removeprefix("Value error, ")
            parts.append(f"{field}: {msg}" if field else msg)
        return cls((f"{source}: " if source else "") + "; ".join(parts))


def closest(name: str, choices: list[str], n: int = 3) -> str:
    """A ' (did you mean ...?)' suffix naming the closest known names, or an empty string."""
    matches = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=n, cutoff=0.5)
    by_lower = {c.lower(): c for c in choices}
    return f" (did you mean {', '.join(by_lower[m] for m in matches)}?)" if matches else ""
