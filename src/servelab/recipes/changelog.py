"""The performance changelog: an append-only YAML ledger whose new entries trigger benchmark runs.

`validate(base, head)` applies the ledger's rules (docs/recipes.md, "The performance changelog") to a change
(two stores: the recipe dir at a base and a head git ref) and returns every problem found, each naming the
rule, the entry and the line. `added_entries` gives the entries a change appended; `jobs_for` expands them
into sweep jobs.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

from pydantic import Field, ValidationError, model_validator

from servelab.errors import ServelabError, closest
from servelab.recipes.filters import MAX_JOBS, Filters
from servelab.recipes.inferencex import IxModel
from servelab.recipes.lock import compute_fingerprints
from servelab.recipes.store import CHANGELOG, LOCK, GitSource, committed, open_store, resolve_dir
from servelab.recipes.sweep import expand
from servelab.recipes.yamlio import load_yaml

PR_LINK_RE = re.compile(r"^https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/pull/[1-9][0-9]*$")
PLACEHOLDER = "XXX"
FORBIDDEN_CHARS = {"\r": "carriage return (CR)", "\t": "tab", "\x00": "NUL"}


class Entry(IxModel):
    config_keys: list[str] = Field(min_length=1)
    description: list[str] = Field(min_length=1)
    pr_link: str
    evals_only: bool = False
    all_evals: bool = False
    append_only: bool = False
    scenario_type: str | None = None

    @model_validator(mode="after")
    def _combine(self) -> Entry:
        if self.append_only and (self.evals_only or self.all_evals):
            raise ValueError("append-only cannot be combined with evals-only or all-evals")
        if any(not d.strip() for d in self.description):
            raise ValueError("description lines must not be empty")
        return self


def check_text(data: bytes, source: str) -> tuple[list[str], str | None]:
    """Encoding and whitespace rules; returns (problems, decoded text or None)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return [f"{source}: not UTF-8 (byte {e.start})"], None
    problems = []
    for ch, name in FORBIDDEN_CHARS.items():
        if ch in text:
            line = text[: text.index(ch)].count("\n") + 1
            problems.append(f"{source}:{line}: contains a {name}; the changelog allows none")
    if text and not text.endswith("\n"):
        problems.append(f"{source}: does not end with a newline")
    return problems, text


def parse_entries(text: str, source: str) -> list[Entry]:
    data = load_yaml(text, source)
    if data is None:
        return []
    if not isinstance(data, list):
        raise ServelabError(f"{source}: expected a YAML list of entries")
    out = []
    for i, item in enumerate(data):
        try:
            out.append(Entry.model_validate(item))
        except ValidationError as e:
            raise ServelabError.from_validation(e, f"{source}: entry {i + 1}") from None
    return out


def entry_lines(text: str) -> list[int]:
    """1-based line numbers where top-level entries start."""
    return [i + 1 for i, line in enumerate(text.split("\n")) if line.startswith("- ")]


def _blank_line_problems(text: str, first_new: int, source: str) -> list[str]:
    """Entries from index `first_new` on must each be preceded by exactly one blank line."""
    lines = text.split("\n")
    problems = []
    for n, start in enumerate(entry_lines(text)):
        if n < first_new or n == 0:
            continue
        i = start - 2  # index of the line above the entry
        blanks = 0
        while i >= 0 and lines[i].strip() == "":
            blanks += 1
            i -= 1
        if blanks != 1:
            problems.append(
                f"{source}:{start}: entry {n + 1} must be separated from the one above by exactly "
                f"one blank line (found {blanks})"
            )
    return problems


def matches(pattern: str, keys) -> list[str]:
    return [k for k in keys if fnmatch.fnmatchcase(k, pattern)]


class Change:
    """A changelog change between two stores (base may lack the changelog: then everything is new).

    `ledger` is (base source, head source, file name) of the changelog; by default each store's own.
    """

    def __init__(self, base, head, pr_link: str | None = None, ledger: tuple | None = None):
        self.base, self.head, self.pr_link = base, head, pr_link
        self.ledger = ledger or (base.source, head.source, CHANGELOG)
        self.problems: list[str] = []
        self.added: list[Entry] = []
        self._check()

    def _check(self) -> None:
        base_source, head_source, name = self.ledger
        src = f"{head_source.label}/{name}"
        head_bytes = head_source.read_bytes(name)
        if head_bytes is None:
            self.problems.append(f"{src}: not found")
            return
        problems, head_text = check_text(head_bytes, src)
        self.problems += problems
        if head_text is None:
            return
        try:
            head_entries = parse_entries(head_text, src)
        except ServelabError as e:
            self.problems.append(str(e))
            return
        base_bytes = base_source.read_bytes(name)
        base_text = base_bytes.decode("utf-8", errors="replace") if base_bytes is not None else ""
        base_entries = parse_entries(base_text, f"{base_source.label}/{name}") if base_text else []

        if head_text.startswith(base_text):
            self.added = head_entries[len(base_entries) :]
            if len(head_entries) < len(base_entries):
                self.problems.append(f"{src}: entries were removed; history is immutable")
            self.problems += _blank_line_problems(head_text, len(base_entries), src)
        else:
            self._check_link_correction(base_text, head_text, base_entries, head_entries, src)
        self._check_new_entries(head_text, len(base_entries), src)
        self._check_fingerprints(src)

    def _check_link_correction(self, base_text, head_text, base_entries, head_entries, src) -> None:
        base_lines, head_lines = base_text.split("\n"), head_text.split("\n")
        if len(head_lines) != len(base_lines) or len(head_entries) != len(base_entries):
            first = next(
                (i for i, (a, b) in enumerate(zip(base_lines, head_lines, strict=False)) if a != b),
                min(len(base_lines), len(head_lines)),
            )
            self.problems.append(
                f"{src}:{first + 1}: history is immutable; existing entries changed (add new entries at the "
                f"tail, and correct pr-links in a change of their own)"
            )
            return
        for i, (a, b) in enumerate(zip(base_lines, head_lines, strict=False)):
            if a == b:
                continue
            if not (a.strip().startswith("pr-link:") and b.strip().startswith("pr-link:")):
                self.problems.append(
                    f"{src}:{i + 1}: history is immutable; only pr-link values may be corrected"
                )
                continue
            link = b.split(":", 1)[1].strip().strip("'\"")
            if not PR_LINK_RE.match(link):
                self.problems.append(
                    f"{src}:{i + 1}: corrected pr-link {link!r} is not a GitHub pull request URL"
                )

    def _check_new_entries(self, head_text: str, first_new: int, src: str) -> None:
        keys = list(self.head.recipes)
        starts = entry_lines(head_text)
        for n, entry in enumerate(self.added, start=first_new):
            where = f"{src}:{starts[n] if n < len(starts) else '?'}: entry {n + 1}"
            link_ok = entry.pr_link == PLACEHOLDER or (
                PR_LINK_RE.match(entry.pr_link) and (self.pr_link is None or entry.pr_link == self.pr_link)
            )
            if not link_ok:
                want = (
                    f"{PLACEHOLDER} or {self.pr_link}"
                    if self.pr_link
                    else f"{PLACEHOLDER} or a GitHub pull URL"
                )
                self.problems.append(f"{where}: pr-link {entry.pr_link!r} must be {want}")
            for pat in entry.config_keys:
                if not matches(pat, keys):
                    self.problems.append(
                        f"{where}: config key {pat!r} matches no recipe" + closest(pat, keys)
                    )

    def _check_fingerprints(self, src: str) -> None:
        head_lock = self.head.lock()
        lock_src = f"{self.head.source.label}/{LOCK}"
        if head_lock is None:
            self.problems.append(f"{lock_src}: not found; run `servelab recipes lock`")
            return
        try:
            current = compute_fingerprints(self.head)
        except ServelabError as e:
            self.problems.append(f"{self.head.source.label}: recipes do not render: {e}")
            return
        for key in sorted(set(current) | set(head_lock)):
            if current.get(key) != head_lock.get(key):
                self.problems.append(
                    f"{lock_src}: {key}: recorded fingerprint is stale (the recipe renders to "
                    f"{current.get(key)}); run `servelab recipes lock`"
                )
        base_lock = self.base.lock() or {}
        covered = [p for e in self.added for p in e.config_keys]
        for key, fp in sorted(current.items()):
            if base_lock.get(key) == fp:
                continue
            if not any(fnmatch.fnmatchcase(key, p) for p in covered):
                what = "is new" if key not in base_lock else "fingerprint changed"
                self.problems.append(f"{key}: {what} but no new {CHANGELOG} entry names it")


def open_change(
    directory: Path | None, base_ref: str, head_ref: str, pr_link: str | None = None, changelog=None
) -> Change:
    """The change between two git refs of the checkout around the current directory.

    The recipes are found as every command finds them (store.resolve_dir) and read at the refs when they are
    committed in this checkout; recipes outside it (those shipped in an installed package) are the same at
    both refs. The changelog is `changelog` when given, else the store's own when the store is committed, else
    ./perf-changelog.yaml; it is always read at the refs.
    """
    root = resolve_dir(directory)
    at_refs = committed(root)
    if at_refs:
        base, head = open_store(root, ref=base_ref), open_store(root, ref=head_ref)
    else:
        base = head = open_store(root)
    ledger = None
    if changelog is not None or not at_refs:
        path = Path(changelog or CHANGELOG)
        ledger = (GitSource(base_ref, path.parent), GitSource(head_ref, path.parent), path.name)
    return Change(base, head, pr_link=pr_link, ledger=ledger)


def jobs_for(store, entries: list[Entry], step_size: int = 2, max_jobs: int = MAX_JOBS):
    """The jobs the added entries ask for, without duplicates (first entry wins)."""
    jobs, seen = [], set()
    for entry in entries:
        f = Filters(
            scenario_type=[entry.scenario_type] if entry.scenario_type else [],
            evals_only=entry.evals_only,
            all_evals=entry.all_evals,
            step_size=step_size,
            max_jobs=max_jobs,
        )
        for job in expand(store, entry.config_keys, f):
            if job.fingerprint in seen:
                continue
            seen.add(job.fingerprint)
            if entry.append_only:
                job.row["append-only"] = True
            jobs.append(job)
    return jobs
