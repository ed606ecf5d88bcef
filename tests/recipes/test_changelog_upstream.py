"""The changelog gate and `changelog jobs` against InferenceX's own verdicts and job matrices on its last 25
changelog commits (tests/data/inferencex/changelog, written by scripts/refresh_upstream_data.py).

Each commit is replayed as InferenceX saw it: its base and head perf-changelog.yaml, and the master-file keys
its jobs depend on at its base and head (the rest of the master files does not reach the result).
"""

import functools
import gzip
import json
from pathlib import Path

import pytest
import yaml

from servelab.errors import ServelabError
from servelab.recipes.changelog import Change, Entry, matrix
from servelab.recipes.ledger import check_bytes, compare_entries, parse_file
from servelab.recipes.recipe_store import open_store

DATA = Path(__file__).parents[1] / "data" / "inferencex"
HISTORY = DATA / "changelog"
INDEX = json.loads((HISTORY / "index.json").read_text())
IDS = [e["commit"][:12] for e in INDEX]


class Blob:
    """One version of the changelog, read as a Change reads a git source."""

    def __init__(self, label: str, data: bytes):
        self.label, self.data = label, data

    def read_bytes(self, name: str) -> bytes:
        return self.data


@functools.cache
def blob(name: str) -> bytes:
    with gzip.open(HISTORY / "blobs" / name) as f:
        return f.read()


def commit_store(tmp_path: Path, entry: dict, side: str):
    configs = json.loads(gzip.decompress((HISTORY / entry["configs"]).read_bytes()))
    d = tmp_path / side
    d.mkdir()
    for name, pairs in configs[side].items():
        (d / name).write_text(yaml.safe_dump(dict(pairs), sort_keys=False))
    runners = configs.get(f"{side}-runners") or (DATA / "configs" / "runners.yaml").read_text()
    (d / "runners.yaml").write_text(runners)
    return open_store(d)


@pytest.fixture(scope="module")
def changes(tmp_path_factory):
    """Each commit's Change, built once for the tests that read it."""
    cache: dict[str, Change] = {}

    def get(entry: dict) -> Change:
        if entry["commit"] not in cache:
            cache[entry["commit"]] = commit_change(tmp_path_factory.mktemp(entry["commit"][:12]), entry)
        return cache[entry["commit"]]

    return get


def commit_change(tmp_path: Path, entry: dict, **rules) -> Change:
    sha = entry["commit"]
    ledger = (Blob(f"{sha}^", blob(entry["base"])), Blob(sha, blob(entry["head"])), "perf-changelog.yaml")
    base, head = commit_store(tmp_path, entry, "base"), commit_store(tmp_path, entry, "head")
    return Change(base, head, ledger=ledger, **rules)


GATE_CASES = json.loads((HISTORY / "gate-cases.json").read_text())


@pytest.mark.slow  # 1.6 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
@pytest.mark.parametrize("name", sorted(GATE_CASES))
def test_gate_refuses_what_inferencex_refused(name):
    """Changes InferenceX's gate tests name by commit, with its verdict at the pinned commit."""
    case = GATE_CASES[name]
    ledger = (Blob("base", blob(case["base"])), Blob("head", blob(case["head"])), "perf-changelog.yaml")
    store = open_store(DATA / "configs")
    problems = Change(store, store, ledger=ledger).problems
    assert (not problems) == case["accepted"]
    deleted = case["gate_message"].split("Found deleted line:", 1)[1].strip()
    assert any(f"deletes a line ({deleted!r})" in p for p in problems), problems


def test_history_is_pinned_whole():
    assert len(INDEX) == 25 and all("configs" in e and "strict" in e and "jobs" in e for e in INDEX)


@pytest.mark.parametrize("entry", INDEX, ids=IDS)
def test_gate_gives_inferencex_verdict(changes, entry):
    change = changes(entry)
    assert (not change.problems) == entry["accepted"], change.problems
    assert len(change.added) == len(
        json.loads(gzip.decompress((HISTORY / entry["jobs"]).read_bytes()))["changelog_metadata"]["entries"]
    )


@functools.cache
def parsed(name: str) -> list[dict]:
    return parse_file(blob(name), name, Entry)


@pytest.mark.parametrize("entry", INDEX, ids=IDS)
def test_gate_reads_the_entries_inferencex_read(changes, entry):
    """The ledger half of the gate: the new entries are InferenceX's, typed as it types them."""
    want = json.loads(gzip.decompress((HISTORY / entry["jobs"]).read_bytes()))["changelog_metadata"]
    change = changes(entry)
    assert [e.model_dump(by_alias=True, exclude_none=True) for e in change.added] == want["entries"]


@pytest.mark.slow
@pytest.mark.parametrize("entry", INDEX, ids=IDS)
def test_merge_rules_give_inferencex_verdict(entry):
    """ledger.merge_rules step by step, each file parsed once for all commits (parsing is the slow part)."""
    sha = entry["commit"]
    try:
        added, corrected = compare_entries(parsed(entry["base"]), parsed(entry["head"]), None, sha)
        check_bytes(blob(entry["base"]), blob(entry["head"]), added, corrected, sha)
        verdict = "ok"
    except ServelabError as e:
        verdict = str(e)
    if entry["strict"] == "ok":
        assert verdict == "ok"
        return
    assert verdict != "ok", f"InferenceX's merge rules reject {sha[:12]}: {entry['strict']}"
    if entry["strict"].startswith("entry "):  # the entry InferenceX names is the one servelab names
        assert entry["strict"].split(" changed")[0] in verdict
    else:
        assert "one empty line" in verdict and "one empty line" in entry["strict"]


def rows(bucket) -> list[dict]:
    """A bucket's rows: a list as it is, a mapping of seq-len names to lists in name order."""
    return [r for name in sorted(bucket) for r in bucket[name]] if isinstance(bucket, dict) else bucket


def differences(got: dict, want: dict) -> list[str]:
    """Where servelab's matrix differs from InferenceX's, on InferenceX's fields (servelab adds its own)."""
    out = []
    for name in sorted(set(want) - {"changelog_metadata"}):
        mine, theirs = rows(got.get(name, [])), rows(want[name])
        if len(mine) != len(theirs):
            out.append(f"{name}: {len(mine)} rows, InferenceX {len(theirs)}")
            continue
        for i, (g, w) in enumerate(zip(mine, theirs, strict=True)):
            diff = {k: (g.get(k), v) for k, v in w.items() if g.get(k) != v}
            if diff:
                out.append(f"{name}[{i}]: {diff}")
                break
    return out


@pytest.mark.parametrize("entry", INDEX, ids=IDS)
def test_jobs_equal_inferencex_matrix(changes, entry):
    want = json.loads(gzip.decompress((HISTORY / entry["jobs"]).read_bytes()))
    change = changes(entry)
    assert change.problems == []
    got = matrix(change, change.jobs, want["changelog_metadata"]["base_ref"], entry["commit"])
    assert got["changelog_metadata"] == want["changelog_metadata"]
    assert differences(got, want) == []


def test_every_row_is_kept_when_fingerprints_repeat(changes):
    """A job's fingerprint leaves out the runner label and the eval marks, so rows that differ only in those
    share one; every row still becomes a job (InferenceX dedups by key and scenario, not by recipe)."""
    repeated = 0
    for entry in INDEX:
        want = json.loads(gzip.decompress((HISTORY / entry["jobs"]).read_bytes()))
        jobs = changes(entry).jobs.all()
        fingerprints = [j.fingerprint for j in jobs]
        repeated += len(fingerprints) - len(set(fingerprints))
        assert len(jobs) == sum(len(rows(want[k])) for k in set(want) - {"changelog_metadata"})
    assert repeated > 0  # the pinned history holds such rows, so the count above is a real check


MULTINODE_COMMIT = next(e for e in INDEX if e["commit"].startswith("def9a650d52a"))


def fixed_multinode(jobs) -> list:
    return [j for j in jobs if "prefill" in j.row and j.scenario == "fixed-seq-len"]


def test_trim_conc_rebuilds_multinode_jobs(tmp_path):
    """--trim-conc cuts a multinode row's concurrency list to its lowest, and its benches follow the row."""
    (tmp_path / "full").mkdir()
    (tmp_path / "trimmed").mkdir()
    full = fixed_multinode(commit_change(tmp_path / "full", MULTINODE_COMMIT).jobs.bench)
    trimmed = fixed_multinode(
        commit_change(tmp_path / "trimmed", MULTINODE_COMMIT, trim_conc=True).jobs.bench
    )
    assert any(len(j.concs()) > 1 for j in full)
    assert [j.concs() for j in trimmed] == [[min(j.concs())] for j in full]
    assert all([b.conc for b in j.benches] == j.concs() for j in trimmed)
