"""The changelog file as bytes: InferenceX's two rule sets for a change to it, each problem one line.

- The gate (what InferenceX's `check-changelog` job runs on every pull request: its
  `utils/validate_perf_changelog.py`, which runs `utils/process_changelog.py`): the head ends with a newline
  and `git diff` deletes no line that holds more than whitespace; the added lines are the new entries.
- The merge rules (`validate_perf_changelog.py`'s parse/compare/raw checks, which InferenceX's merge helper
  applies before a pull request is merged): every entry of both files typed, existing entries immutable except
  pr-link corrections, new entries appended byte for byte after the history, one empty line between entries,
  one final newline.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from pydantic import BaseModel, ValidationError

from servelab.errors import ServelabError
from servelab.recipes.yamlio import load_yaml

ENTRY_START = b"- config-keys:"
PULL_URL = re.compile(r"https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/pull/[0-9]+")
PLACEHOLDER = "XXX"
FORBIDDEN = {b"\r": "CR characters", b"\t": "tabs", b"\0": "NUL bytes"}


def added_text(base: bytes, head: bytes, label: str) -> tuple[str, list[str]]:
    """The lines `git diff` adds from base to head, joined, and a problem for each deleted line that holds
    more than whitespace (the gate's append-only rule: history may lose blank lines, nothing else)."""
    with tempfile.TemporaryDirectory(prefix="servelab-changelog-") as tmp:
        a, b = Path(tmp) / "base", Path(tmp) / "head"
        a.write_bytes(base)
        b.write_bytes(head)
        # Plain Myers diff, as InferenceX's gate gets from `git diff` with git's defaults.
        argv = ["git", "-c", "diff.algorithm=myers", "diff", "--no-index", "--no-color", "--no-ext-diff"]
        try:
            run = subprocess.run([*argv, "--", str(a), str(b)], capture_output=True, check=False)
        except FileNotFoundError:
            raise ServelabError("git is not installed; the changelog rules compare with git diff") from None
    if run.returncode not in (0, 1):
        raise ServelabError(f"{label}: git diff failed: {run.stderr.decode(errors='replace').strip()}")
    added, problems = [], []
    for line in run.stdout.decode("utf-8", errors="replace").split("\n"):
        if line.startswith("-") and not line.startswith("---"):
            if line[1:].strip():
                problems.append(f"{label}: deletes a line ({line[1:].strip()!r}); history is append-only")
        elif line.startswith("+") and not line.startswith("+++"):
            added.append(line[1:])
    return "\n".join(added), problems


def parse_file(raw: bytes, label: str, entry_model: type[BaseModel]) -> list[dict]:
    """The merge rules for one whole file: final newline, no CR/tab/NUL, UTF-8, YAML without duplicate keys,
    a list with one `- config-keys:` line per entry, each entry typed. Raises ServelabError."""
    if not raw.endswith(b"\n"):
        raise ServelabError(f"{label}: does not end with a newline")
    for byte, name in FORBIDDEN.items():
        if byte in raw:
            line = raw[: raw.index(byte)].count(b"\n") + 1
            raise ServelabError(f"{label}:{line}: contains {name}; the changelog allows none")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ServelabError(f"{label}: not UTF-8 (byte {e.start})") from None
    data = load_yaml(text, label)
    if not isinstance(data, list):
        raise ServelabError(f"{label}: expected a YAML list of entries")
    starts = sum(line.startswith(ENTRY_START.decode()) for line in text.splitlines())
    if starts != len(data):
        raise ServelabError(
            f"{label}: {starts} lines start an entry with '- config-keys:' but the YAML holds {len(data)} "
            "entries"
        )
    for i, item in enumerate(data, start=1):
        if not isinstance(item, dict):
            raise ServelabError(f"{label}: entry {i} is not a mapping")
        try:
            entry_model.model_validate(item)
        except ValidationError as e:
            raise ServelabError.from_validation(e, f"{label}: entry {i}") from None
    return data


def _without_link(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k != "pr-link"}


def check_new_link(link: str, own: str | None) -> str | None:
    """A new entry's pr-link: this pull request's URL or a placeholder when `own` is given (a pull request
    run), else (a change on the main branch) a pull request URL."""
    if own is None:
        return None if PULL_URL.fullmatch(link) else f"pr-link {link!r} must be a GitHub pull request URL"
    placeholders = {PLACEHOLDER, own.rsplit("/", 1)[0] + "/" + PLACEHOLDER}
    if link in placeholders or link == own:
        return None
    return f"pr-link {link!r} must be {own} or {PLACEHOLDER}"


def compare_entries(base: list[dict], head: list[dict], own_link: str | None, label: str) -> tuple[int, int]:
    """(added entries, pr-link corrections) of head over base; raises ServelabError on the first broken rule:
    no entry deleted, existing entries unchanged except a pr-link corrected to a pull request URL, corrections
    and additions never in one change, new pr-links as `check_new_link` says."""
    if len(head) < len(base):
        raise ServelabError(f"{label}: entries were deleted; history is immutable")
    corrections = 0
    for i, (old, new) in enumerate(zip(base, head, strict=False), start=1):
        if old == new:
            continue
        if _without_link(old) != _without_link(new):
            raise ServelabError(
                f"{label}: entry {i} changed; existing entries are immutable except for pr-link corrections"
            )
        link = str(new.get("pr-link") or "")
        if str(old.get("pr-link") or "") == link:
            raise ServelabError(f"{label}: entry {i} was reformatted without a change of meaning")
        if not PULL_URL.fullmatch(link):
            raise ServelabError(f"{label}: entry {i}: corrected pr-link {link!r} is not a pull request URL")
        corrections += 1
    additions = head[len(base) :]
    if corrections and additions:
        raise ServelabError(
            f"{label}: do not mix pr-link corrections of history with new entries; make them two changes"
        )
    for i, entry in enumerate(additions, start=len(base) + 1):
        problem = check_new_link(str(entry.get("pr-link") or ""), own_link)
        if problem:
            raise ServelabError(f"{label}: entry {i}: {problem}")
    return len(additions), corrections


def check_bytes(base: bytes, head: bytes, additions: int, corrections: int, label: str) -> None:
    """History stays byte for byte: new entries appended after exactly one empty line, one empty line between
    them and one final newline; a correction changes only `  pr-link:` lines; otherwise nothing changes."""
    if additions:
        if not head.startswith(base):
            raise ServelabError(
                f"{label}: new entries changed the bytes of history; restore the base file byte for byte "
                "and append at the end"
            )
        start = ENTRY_START if not base or base.endswith(b"\n\n") else b"\n" + ENTRY_START
        if not head[len(base) :].startswith(start):
            raise ServelabError(
                f"{label}: new entries must follow history after exactly one empty line, at the end"
            )
        starts = [m.start() for m in re.finditer(rb"(?m)^- config-keys:[^\r\n]*\n", head)]
        for s in starts[-additions:][1:]:
            if not head[:s].endswith(b"\n\n") or head[:s].endswith(b"\n\n\n"):
                line = head[:s].count(b"\n") + 1
                raise ServelabError(
                    f"{label}:{line}: new entries must be separated by exactly one empty line"
                )
        if head.endswith(b"\n\n"):
            raise ServelabError(f"{label}: the last entry must end with exactly one newline")
        return
    if corrections:
        old_lines, new_lines = base.splitlines(keepends=True), head.splitlines(keepends=True)
        if len(old_lines) != len(new_lines):
            raise ServelabError(f"{label}: pr-link corrections may not add or delete lines")
        changed = 0
        for n, (a, b) in enumerate(zip(old_lines, new_lines, strict=True), start=1):
            if a == b:
                continue
            changed += 1
            if not (a.startswith(b"  pr-link:") and b.startswith(b"  pr-link:") and b.endswith(b"\n")):
                raise ServelabError(f"{label}:{n}: history changed outside a pr-link line")
        if changed != corrections:
            raise ServelabError(f"{label}: expected {corrections} changed pr-link line(s), found {changed}")
        return
    if base != head:
        raise ServelabError(
            f"{label}: changed without adding an entry or correcting a pr-link; the whitespace and "
            "formatting of history are immutable"
        )


def merge_rules(
    base: bytes, head: bytes, own_link: str | None, label: str, base_label: str, entry_model: type[BaseModel]
) -> list[dict]:
    """All merge rules on a change; the new entries (as written) or ServelabError at the first broken rule.
    An empty base (no changelog yet) holds no entries."""
    old = parse_file(base, base_label, entry_model) if base else []
    new = parse_file(head, label, entry_model)
    additions, corrections = compare_entries(old, new, own_link, label)
    check_bytes(base, head, additions, corrections, label)
    return new[len(old) :]
