"""The performance changelog: an append-only YAML ledger whose new entries trigger benchmark runs.

`Change(base, head)` applies InferenceX's rules (docs/recipes.md, "The performance changelog") to a change
between two stores (the recipe dir at a base and a head git ref) and lists every problem, one line each: the
gate by default, the merge rules with `strict` (recipes/ledger.py holds both). The rules about new entries are
the same in both: typed, keys found, append-only consistent and in scope, the jobs generate. A store with a
fingerprints.lock (servelab's own) adds the fingerprint rule. `jobs_for` and `matrix` expand the new entries
as InferenceX's `process_changelog.py` does: throughput jobs without evals, eval jobs apart. The rows are
recipes/matrix.py's (InferenceX's generator in test-config mode); append-only deltas and --trim-conc cut
those rows before they become jobs, so each job's benches run exactly its row's concurrencies.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, model_validator

from servelab.errors import ServelabError, closest
from servelab.recipes.filters import MAX_JOBS, Filters
from servelab.recipes.inferencex import IxModel
from servelab.recipes.ledger import added_text, merge_rules
from servelab.recipes.lock import compute_fingerprints
from servelab.recipes.matrix import Point, trim_conc
from servelab.recipes.matrix import matrix as matrix_points
from servelab.recipes.recipe_store import CHANGELOG, LOCK, GitSource, checkout_dir, committed, open_store
from servelab.recipes.sweep import Job, build_job
from servelab.recipes.yamlio import load_yaml

SCENARIO_TYPES = ("fixed-seq-len", "agentic-coding")
# Row fields that name a point of a curve rather than the recipe (InferenceX's process_changelog).
POINT_FIELDS = {"conc", "exp-name", "recipe-fingerprint"}
# Row fields servelab adds to InferenceX's; left out of InferenceX's recipe-fingerprint.
SERVELAB_FIELDS = {"image-digest"}


class Entry(IxModel):
    """One changelog entry, as InferenceX types it (`ChangelogEntry` in utils/matrix_logic/validation.py)."""

    config_keys: list[str] = Field(min_length=1)
    description: list[str] = Field(min_length=1)
    pr_link: str
    evals_only: bool = False
    all_evals: bool = False
    append_only: bool = Field(
        False, description="Run only points added to existing curves; every existing point stays unchanged."
    )
    eval_min_prefill_ep: int | None = Field(
        None, ge=1, description="Drop multinode eval jobs whose prefill ep is below this."
    )
    scenario_type: list[Literal["fixed-seq-len", "agentic-coding"]] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _append_only(self) -> Entry:
        if self.append_only and (self.evals_only or self.all_evals or self.eval_min_prefill_ep is not None):
            raise ValueError(
                "append-only cannot be combined with evals-only, all-evals or eval-min-prefill-ep"
            )
        return self

    @property
    def scenarios(self) -> tuple[str, ...]:
        return tuple(s for s in SCENARIO_TYPES if s in (self.scenario_type or SCENARIO_TYPES))


def key_matches(pattern: str, key: str) -> bool:
    """InferenceX's config-key patterns: `*` matches any run of characters; anything else matches itself."""
    if "*" not in pattern:
        return pattern == key
    return re.fullmatch(re.escape(pattern).replace(r"\*", ".*"), key) is not None


def resolve_keys(patterns: list[str], keys: list[str]) -> list[str]:
    """The keys the patterns name, in pattern order then store order, each once."""
    out: dict[str, None] = {}
    for pat in patterns:
        hits = [k for k in keys if key_matches(pat, k)]
        if not hits:
            what = "matches no config key" if "*" in pat else "is not a config key"
            raise ServelabError(f"config key {pat!r} {what}" + closest(pat, keys))
        out.update(dict.fromkeys(hits))
    return list(out)


class Change:
    """A changelog change between two stores (base may lack the changelog: then everything is new).

    `ledger` is (base source, head source, file name) of the changelog; by default each store's own.
    `pr_link` is this pull request's URL (merge rules: new entries use it or XXX; without it a change on the
    main branch, whose new entries need a pull request URL). `all_evals` / `evals_only` are InferenceX's
    pull-request labels of the same names; `trim_conc` runs each throughput curve at its lowest concurrency
    only (its sweep-enabled label absent). `jobs` holds what the new entries expand to.
    """

    def __init__(
        self,
        base,
        head,
        pr_link: str | None = None,
        ledger: tuple | None = None,
        strict: bool = False,
        all_evals: bool = False,
        evals_only: bool = False,
        trim_conc: bool = False,
        max_jobs: int = MAX_JOBS,
    ):
        self.base, self.head, self.pr_link, self.strict = base, head, pr_link, strict
        self.all_evals, self.evals_only, self.max_jobs = all_evals, evals_only, max_jobs
        self.trim_conc = trim_conc
        self.jobs = ChangeJobs([], [])
        self.ledger = ledger or (base.source, head.source, CHANGELOG)
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.added: list[Entry] = []
        self.selected: list[list[str]] = []
        self._check()

    def _check(self) -> None:
        base_source, head_source, name = self.ledger
        label = f"{head_source.label}/{name}"
        head_raw = head_source.read_bytes(name)
        if head_raw is None:
            self.problems.append(f"{label}: not found")
            return
        base_raw = base_source.read_bytes(name) or b""
        try:
            if self.strict:
                self._merge_rules(base_raw, head_raw, label, f"{base_source.label}/{name}")
            else:
                self._gate_rules(base_raw, head_raw, label)
        except ServelabError as e:
            self.problems.append(str(e))
        if not self.problems:
            self._check_entries(label)
        self._check_fingerprints()

    def _gate_rules(self, base_raw: bytes, head_raw: bytes, label: str) -> None:
        if not head_raw.endswith(b"\n"):
            raise ServelabError(f"{label}: does not end with a newline")
        if base_raw == head_raw:
            return
        try:
            head_raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ServelabError(f"{label}: not UTF-8 (byte {e.start})") from None
        text, deleted = added_text(base_raw, head_raw, label)
        if deleted:
            self.problems += deleted
            return
        data = load_yaml(text, f"{label} (added lines)") if text.strip() else None
        if not data:
            raise ServelabError(f"{label}: changed without adding an entry")
        if not isinstance(data, list):
            raise ServelabError(f"{label}: the added lines are not a YAML list of entries")
        self._take(data, label)

    def _merge_rules(self, base_raw: bytes, head_raw: bytes, label: str, base_label: str) -> None:
        self._take(merge_rules(base_raw, head_raw, self.pr_link, label, base_label, Entry), label)

    def _take(self, data: list, label: str) -> None:
        for i, item in enumerate(data, start=1):
            try:
                self.added.append(Entry.model_validate(item))
            except ValidationError as e:
                raise ServelabError.from_validation(e, f"{label}: new entry {i}") from None

    def _check_entries(self, label: str) -> None:
        if not self.added:
            return
        append = [e.append_only for e in self.added]
        if any(append) and not all(append):
            self.problems.append(f"{label}: append-only entries cannot share a change with other entries")
        if any(append) and (self.all_evals or self.evals_only):
            self.problems.append(f"{label}: append-only entries cannot run with all-evals or evals-only")
        keys = list(self.head.recipes)
        for n, entry in enumerate(self.added, start=1):
            try:
                self.selected.append(resolve_keys(entry.config_keys, keys))
            except ServelabError as e:
                self.problems.append(f"{label}: new entry {n}: {e}")
        if self.problems:
            return
        try:
            if all(append):
                check_append_scope(self)
            self.jobs = jobs_for(self)
        except ServelabError as e:
            self.problems.append(f"{label}: the new entries do not expand into jobs: {e}")

    def _check_fingerprints(self) -> None:
        head_lock, base_lock = self.head.lock(), self.base.lock()
        lock_src = f"{self.head.source.label}/{LOCK}"
        if head_lock is None:
            if base_lock is None:
                self.notes.append(
                    f"no {LOCK} at either ref: the fingerprint rule does not apply (InferenceX keeps no "
                    "lock; its gate checks that the new entries' keys exist and their jobs generate)"
                )
            else:
                self.problems.append(f"{lock_src}: removed; run `servelab recipes lock`")
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
        covered = [p for e in self.added for p in e.config_keys]
        for key, fp in sorted(current.items()):
            if (base_lock or {}).get(key) == fp:
                continue
            if not any(key_matches(p, key) for p in covered):
                what = "is new" if key not in (base_lock or {}) else "fingerprint changed"
                self.problems.append(f"{key}: {what} but no new {CHANGELOG} entry names it")


def check_append_scope(change: Change) -> None:
    """The append-only change touches only what its entries select (see `check_scope`)."""
    scope: dict[str, set[str]] = defaultdict(set)
    for entry, keys in zip(change.added, change.selected, strict=True):
        for key in keys:
            scope[key].update(entry.scenarios)
    base = {k: r.dump() for k, r in change.base.recipes.items()}
    head = {k: r.dump() for k, r in change.head.recipes.items()}
    check_scope(base, head, scope)


def check_scope(base: dict[str, dict], head: dict[str, dict], scope: dict[str, set[str]]) -> None:
    """An append-only change may touch only the selected scenarios of selected keys that exist at the base;
    config-wide fields only when every scenario of the key is selected (InferenceX's
    validate_append_only_scope). Changes inside the scope are judged on the rows (`added_points`)."""
    missing = sorted(set(scope) - set(base))
    if missing:
        raise ServelabError(f"append-only needs every selected key at the base; missing: {missing}")
    unrelated = sorted(k for k in set(base) | set(head) if k not in scope and base.get(k) != head.get(k))
    if unrelated:
        raise ServelabError(f"append-only changed keys its entries do not select: {unrelated}")
    for key, scenarios in scope.items():
        old, new = base[key], head[key]
        old_scenarios, new_scenarios = old.get("scenarios", {}), new.get("scenarios", {})
        if old_scenarios.keys() != new_scenarios.keys():
            raise ServelabError(f"append-only added or removed a scenario of {key}")
        outside = old_scenarios.keys() - scenarios
        rest = {k: v for k, v in old.items() if k != "scenarios"}
        if outside and rest != {k: v for k, v in new.items() if k != "scenarios"}:
            raise ServelabError(
                f"append-only changed config-wide fields of {key}, which reach scenarios outside its scope"
            )
        for s in outside:
            if old_scenarios[s] != new_scenarios[s]:
                raise ServelabError(f"append-only changed scenario {s} of {key}, outside its scope")


def _frozen(value):
    return json.dumps(value, sort_keys=True)


def _curve(row: dict) -> str:
    return _frozen({k: v for k, v in row.items() if k not in POINT_FIELDS})


def _concs(row: dict) -> list[int]:
    conc = row["conc"]
    return conc if isinstance(conc, list) else [conc]


def _series(row: dict) -> tuple:
    """The published curve a row belongs to (InferenceX's visual series key)."""
    agentic = row.get("scenario-type") == "agentic-coding"
    offload = "off" if row.get("kv-offloading", "none") in (None, "", "none") else "on"
    prefill, decode = row.get("prefill") or {}, row.get("decode") or {}
    return (
        row.get("model"),
        row.get("model-prefix"),
        row.get("precision"),
        row.get("framework"),
        row.get("runner"),
        bool(row.get("disagg", False)),
        "agentic_traces" if agentic else "single_turn",
        None if agentic else row.get("isl"),
        None if agentic else row.get("osl"),
        offload,
        "" if agentic else row.get("spec-decoding", "none"),
        prefill.get("hardware"),
        decode.get("hardware"),
    )


def added_points(base: list[dict], head: list[dict]) -> list[tuple[int, int | list[int]]]:
    """The points the head rows add, as (head row index, its new concurrency or concurrencies); every base
    curve and concurrency must remain, and new points must extend a published curve with one unchanged image
    (InferenceX's append_only_delta)."""
    base_curves: dict[str, set[int]] = defaultdict(set)
    head_curves: dict[str, set[int]] = defaultdict(set)
    for row in base:
        base_curves[_curve(row)].update(_concs(row))
    for row in head:
        head_curves[_curve(row)].update(_concs(row))
    if not base_curves:
        raise ServelabError("append-only needs an existing curve at the base")
    if base_curves.keys() - head_curves.keys():
        raise ServelabError("append-only may not remove or modify existing curves")
    for curve, concs in base_curves.items():
        if concs - head_curves[curve]:
            raise ServelabError(
                f"append-only may not remove concurrencies {sorted(concs - head_curves[curve])}"
            )
    points: list[tuple[int, int | list[int]]] = []
    emitted: dict[str, set[int]] = defaultdict(set)
    for i, row in enumerate(head):
        curve, new = _curve(row), []
        for c in _concs(row):
            if c not in base_curves.get(curve, set()) and c not in emitted[curve]:
                new.append(c)
                emitted[curve].add(c)
        if new:
            points.append((i, new if isinstance(row["conc"], list) else new[0]))
    if not points:
        raise ServelabError("append-only added no points")
    images: dict[tuple, set] = defaultdict(set)
    for row in base:
        images[_series(row)].add(row.get("image"))
    for i, _ in points:
        image = head[i].get("image")
        if image is None or images.get(_series(head[i]), set()) != {image}:
            raise ServelabError(
                "append-only points must extend an existing curve that has one unchanged image"
            )
    return points


def append_delta(base: list[Point], head: list[Point]) -> list[Point]:
    """The head rows that add points (a multinode row keeps only its new concurrencies)."""
    out = []
    for i, conc in added_points([p.row for p in base], [p.row for p in head]):
        point = head[i]
        out.append(point if point.row["conc"] == conc else replace(point, row={**point.row, "conc": conc}))
    return out


def _scenario_groups(selected: list[str], scenarios: tuple[str, ...], seen: dict) -> dict[tuple, list[str]]:
    """Keys grouped by the scenarios of this entry not yet expanded for them by an earlier entry."""
    groups: dict[tuple, list[str]] = defaultdict(list)
    for key in selected:
        unseen = tuple(s for s in scenarios if s not in seen[key])
        if unseen:
            seen[key].update(unseen)
            groups[unseen].append(key)
    return groups


def _rows(store, keys: list[str], f: Filters) -> list[Point]:
    """The rows InferenceX's generator gives for these keys in test-config mode (keys in the order given),
    refused above the job limit."""
    points = matrix_points(store, keys, f)
    if len(points) > f.max_jobs:
        raise ServelabError(
            f"{', '.join(keys)}: {len(points)} jobs, above the limit of {f.max_jobs}; raise --max-jobs",
            field="max_jobs",
        )
    return points


class ChangeJobs:
    """The jobs a change asks for: throughput jobs (no evals) and eval-only jobs, kept apart."""

    def __init__(self, bench: list[Job], evals: list[Job]):
        self.bench, self.evals = bench, evals

    def all(self) -> list[Job]:
        return self.bench + self.evals


def jobs_for(change: Change) -> ChangeJobs:
    """InferenceX's expansion: entries with all-evals first; per key each scenario once for throughput and
    once for evals; append-only entries run only their new points and no evals; eval jobs are the rows the
    eval policy marks, with eval-only set; with trim_conc the throughput rows are trimmed together, as
    InferenceX trims them after every entry has expanded."""
    bench: list[Point] = []
    evals: list[Point] = []
    bench_seen: dict[str, set] = defaultdict(set)
    eval_seen: dict[str, set] = defaultdict(set)
    entries = sorted(zip(change.added, change.selected, strict=True), key=lambda p: not p[0].all_evals)
    for entry, selected in entries:
        suppress = change.evals_only or entry.evals_only or entry.all_evals
        if not suppress:
            for scenarios, keys in _scenario_groups(selected, entry.scenarios, bench_seen).items():
                f = Filters(
                    mode="test-config", no_evals=True, scenario_type=list(scenarios), max_jobs=change.max_jobs
                )
                found = _rows(change.head, keys, f)
                if entry.append_only:
                    found = append_delta(_rows(change.base, keys, f), found)
                bench += found
        if entry.append_only:
            continue
        for scenarios, keys in _scenario_groups(selected, entry.scenarios, eval_seen).items():
            f = Filters(
                mode="test-config",
                evals_only=True,
                all_evals=change.all_evals or entry.all_evals,
                scenario_type=list(scenarios),
                max_jobs=change.max_jobs,
            )
            evals += [p for p in _rows(change.head, keys, f) if not _below_prefill_ep(p.row, entry)]
    if change.trim_conc:
        bench = trim_conc(bench)
    return ChangeJobs([build_job(change.head, p) for p in bench], [build_job(change.head, p) for p in evals])


def _below_prefill_ep(row: dict, entry: Entry) -> bool:
    """A multinode eval row whose prefill ep is below the entry's eval-min-prefill-ep (dropped)."""
    prefill = row.get("prefill")
    return isinstance(prefill, dict) and int(prefill.get("ep", 1)) < (entry.eval_min_prefill_ep or 0)


def recipe_fingerprint(row: dict) -> str:
    """InferenceX's recipe-fingerprint: sha256 of its row fields except the point's."""
    recipe = {k: v for k, v in row.items() if k not in POINT_FIELDS | SERVELAB_FIELDS}
    canonical = json.dumps(recipe, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _seq_bucket(row: dict) -> str:
    named = {(1024, 1024): "1k1k", (8192, 1024): "8k1k"}
    return named.get((row["isl"], row["osl"]), f"{row['isl']}_{row['osl']}")


def _entry(job: Job) -> dict:
    """The job's matrix entry with the defaults InferenceX's matrix schema (ChangelogMatrixEntry, which
    process_changelog.py validates its output with) fills in: eval-only and, multinode, eval-all-concs on
    fixed-seq-len rows; additional-settings on every prefill/decode pool."""
    row = job.matrix_entry()
    if row.get("scenario-type") != "agentic-coding":
        row.setdefault("eval-only", False)
        if row.get("prefill") is not None:
            row.setdefault("eval-all-concs", False)
    for pool in ("prefill", "decode"):
        if row.get(pool) is not None:
            row[pool] = {**row[pool], "additional-settings": row[pool].get("additional-settings", [])}
    return row


def matrix(change: Change, jobs: ChangeJobs, base_ref: str, head_ref: str) -> dict:
    """InferenceX's job structure (process_changelog.py's output, which its run-sweep workflow dispatches):
    throughput rows by node kind and seq-len (or `agentic`), eval rows in four lists of their own, and the
    new entries. Each row is the job's matrix entry (InferenceX's fields plus config-key and fingerprint)."""
    out: dict = {"single_node": defaultdict(list), "multi_node": defaultdict(list)}
    for job in jobs.bench:
        row = {**_entry(job), "recipe-fingerprint": recipe_fingerprint(job.row)}
        side = "multi_node" if job.row.get("prefill") is not None else "single_node"
        bucket = "agentic" if job.scenario == "agentic-coding" else _seq_bucket(job.row)
        out[side][bucket].append(row)
    out = {k: dict(v) for k, v in out.items()}
    for name, multi, agentic in (
        ("evals", False, False),
        ("agentic_evals", False, True),
        ("multinode_evals", True, False),
        ("multinode_agentic_evals", True, True),
    ):
        out[name] = [
            _entry(j)
            for j in jobs.evals
            if (j.row.get("prefill") is not None) == multi and (j.scenario == "agentic-coding") == agentic
        ]
    out["changelog_metadata"] = {
        "base_ref": base_ref,
        "head_ref": head_ref,
        "entries": [e.model_dump(by_alias=True, exclude_none=True) for e in change.added],
    }
    return out


def open_change(
    directory: Path | None,
    base_ref: str,
    head_ref: str,
    pr_link: str | None = None,
    changelog=None,
    **rules,
) -> Change:
    """The change between two git refs of the checkout around the current directory.

    The recipes are found as every command finds them (store.resolve_dir), or, when those are not committed
    in this checkout (an installed servelab's own), the checkout's own store (store.checkout_dir: an
    InferenceX checkout's configs/, a servelab checkout's src/servelab/recipes/data), and read at the refs
    when they are committed in this checkout; recipes outside it are the same at both refs. The changelog
    is `changelog` when given, else the store's own when the store is committed and has one at the head,
    else the one beside the store (an InferenceX checkout keeps perf-changelog.yaml at its root, beside
    configs/), else ./perf-changelog.yaml; it is always read at the refs. `rules` go to Change (strict,
    all_evals, evals_only, max_jobs).
    """
    root = checkout_dir(directory)
    at_refs = committed(root)
    if at_refs:
        base, head = open_store(root, ref=base_ref), open_store(root, ref=head_ref)
    else:
        base = head = open_store(root)
    ledger = None
    if changelog is not None or not at_refs:
        path = Path(changelog or CHANGELOG)
        ledger = (GitSource(base_ref, path.parent), GitSource(head_ref, path.parent), path.name)
    elif head.source.read_bytes(CHANGELOG) is None:
        ledger = (GitSource(base_ref, root.parent), GitSource(head_ref, root.parent), CHANGELOG)
    return Change(base, head, pr_link=pr_link, ledger=ledger, **rules)
