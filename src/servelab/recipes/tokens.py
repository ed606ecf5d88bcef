"""The string types of recipe-side files: every value that reaches a generated CI script has a pattern.

Sweeps write shell scripts, Buildkite pipelines and GitHub matrices from recipe values. Quoting at the point
of output is the second line of defence; the first is here: names, labels, image references and paths are
checked against a pattern when a file is read, so a newline, `;`, `$(...)` or `${{ }}` never gets that far.
Free-form values (engine flags, env values) may hold shell characters, which are always quoted, but no
control characters or line separators.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator

from servelab.errors import ServelabError

# C0 and C1 controls, DEL, and the Unicode line and paragraph separators (YAML and some editors break lines
# at U+0085, U+2028 and U+2029; bash does not).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _checker(regex: str, what: str) -> Callable[[str], str]:
    pattern = re.compile(regex)

    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return check


def _no_control(value: str) -> str:
    m = _CONTROL.search(value)
    if m:
        raise ValueError(f"{value!r} contains the control character {m.group()!r}")
    return value


def check_text(value: Any, where: str = "") -> None:
    """Refuse control characters in every string of a nested value (JSON-like engine configs)."""
    if isinstance(value, str):
        try:
            _no_control(value)
        except ValueError as e:
            raise ValueError(f"{where}: {e}" if where else str(e)) from None
    elif isinstance(value, dict):
        for k, v in value.items():
            check_text(k, where)
            check_text(v, f"{where}.{k}" if where else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_text(v, f"{where}[{i}]")


# Config keys, model prefixes, precisions, frameworks, scenario types, node kinds: also parts of file names.
check_name = _checker(r"[A-Za-z0-9][A-Za-z0-9_.+-]*", "a name (letters, digits, and _ . + - after the first)")
Name = Annotated[str, AfterValidator(check_name)]


def config_key(key: object, source: str) -> str:
    """A config key as read from a file: a name, since it becomes part of job labels and script names."""
    try:
        return check_name(str(key))
    except ValueError as e:
        raise ServelabError(f"{source}: config key {e}") from None


# A CI runner label or queue (InferenceX labels look like cluster:b200-nb).
Label = Annotated[
    str, AfterValidator(_checker(r"[A-Za-z0-9][A-Za-z0-9_.:+-]*", "a label (letters, digits, _ . : + -)"))
]
# registry[:port]/name[:tag][@sha256:digest]; InferenceX writes enroot's host#path form too.
ImageRef = Annotated[
    str,
    AfterValidator(
        _checker(
            r"[A-Za-z0-9][A-Za-z0-9._-]*(?::[0-9]{1,5})?(?:[/#][A-Za-z0-9][A-Za-z0-9._-]*)*"
            r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?",
            "an image reference (registry/name:tag[@sha256:digest])",
        )
    ),
]
# A Hugging Face id (org/name) or a local path; never starts with '-', which would read as a flag.
ModelId = Annotated[
    str, AfterValidator(_checker(r"[A-Za-z0-9_./][A-Za-z0-9_./:@+=-]*", "a model id (org/name) or a path"))
]
# A file system path (CUDA_HOME, result dir).
PathStr = Annotated[
    str, AfterValidator(_checker(r"[A-Za-z0-9_./][A-Za-z0-9_./+-]*", "a path (letters, digits, _ . / + -)"))
]
# A git revision: commit id, branch or tag.
Revision = Annotated[str, AfterValidator(_checker(r"[A-Za-z0-9][A-Za-z0-9_./-]*", "a git revision"))]
EnvName = Annotated[
    str,
    AfterValidator(
        _checker(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
    ),
]
# InferenceX's multinode additional-settings: NAME=value, the value a word of safe characters.
Setting = Annotated[
    str,
    AfterValidator(
        _checker(
            r"[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_./:,=@+\[\]-]*",
            "a NAME=value setting (value: letters, digits, _ . / : , = @ + [ ] -)",
        )
    ),
]
# Free text that is quoted wherever it is emitted (engine flags, env values): no control characters.
Text = Annotated[str, AfterValidator(_no_control)]


def _no_control_but_newline(value: str) -> str:
    _no_control(value.replace("\n", " "))
    return value


# A server argument as an upstream script passes it, quoted wherever it is emitted: free text in which a
# newline is allowed (a JSON value the script writes indented, as InferenceX's agentic vLLM scripts do), no
# other control character.
ArgText = Annotated[str, AfterValidator(_no_control_but_newline)]
