"""InferenceX's own changelog gate tests (utils/changelog_gate_tests at the pinned commit), case by case, held
against servelab's rules: the same inputs must get the same verdict, for the same reason.

Ported: test_validate_perf_changelog.py (the file rules, the entry comparison, the byte rules, the gate's
newline and matrix checks) and the rule check inside test_prepare_perf_changelog_merge.py (a historical
whitespace change). Not ported, because servelab has no counterpart: the tests of InferenceX's workflow files
(test_run_sweep_gating.py, the workflow half of test_validate_perf_changelog.py), of its merge helper script
and ingest recovery (test_recover_failed_ingest.py), and the merge helper's rewriting of the file
(canonicalizing placeholders, resolving conflicts), which are tools rather than rules. The append-only cases
of utils/test_process_changelog.py are in test_changelog_append_only.py. The
conflict-resolution case of PR 1717 names two upstream commits: their changelogs are pinned
(changelog/gate-cases.json) and held in test_changelog_upstream.py; its rule is also here, in
test_gate_refuses_a_deleted_line.
"""

import pytest
import yaml

from servelab.errors import ServelabError
from servelab.recipes.changelog import Change, Entry
from servelab.recipes.ledger import check_bytes, compare_entries, merge_rules, parse_file
from servelab.recipes.recipe_store import open_store

PR = "https://github.com/SemiAnalysisAI/InferenceX/pull/"


def entry(key: str, link: str = PR + "1") -> dict:
    return {"config-keys": [key], "description": [f"Update {key}"], "pr-link": link}


def render(entries: list[dict]) -> bytes:
    return yaml.safe_dump(entries, sort_keys=False).encode()


def parse(raw: bytes) -> list[dict]:
    return parse_file(raw, "test changelog", Entry)


def compare(base, head, own=None):
    return compare_entries(base, head, own, "test changelog")


def test_parse_validates_complete_file():
    assert parse(render([entry("config-a")])) == [entry("config-a")]


def test_parse_rejects_missing_final_newline():
    with pytest.raises(ServelabError, match="does not end with a newline"):
        parse(render([entry("config-a")]).rstrip(b"\n"))


def test_parse_rejects_malformed_nested_entry():
    raw = b"""- config-keys:
    - config-a
  description:
    - Update config-a
  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/1
  - config-keys:
    - config-b
  description:
    - Update config-b
  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/2
"""
    with pytest.raises(ServelabError, match="not valid YAML"):
        parse(raw)


def test_parse_rejects_duplicate_mapping_keys():
    raw = b"""- config-keys:
    - config-a
  description:
    - First
  description:
    - Second
  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/1
"""
    with pytest.raises(ServelabError, match="duplicate key 'description'"):
        parse(raw)


def test_parse_counts_entry_lines():
    raw = b"- {config-keys: [config-a], description: [Update config-a], pr-link: XXX}\n"
    with pytest.raises(
        ServelabError, match="0 lines start an entry with '- config-keys:' but the YAML holds 1"
    ):
        parse(raw)


def test_scenario_type_is_a_list_as_upstream_writes_it():
    listed = {**entry("config-a"), "scenario-type": ["agentic-coding"]}
    assert parse(render([listed])) == [listed]
    with pytest.raises(ServelabError, match="scenario-type"):
        parse(render([{**entry("config-a"), "scenario-type": "agentic-coding"}]))


def test_appended_pr_entry_allowed():
    base = [entry("config-a")]
    added = entry("config-b", "XXX")
    assert compare(base, [*base, added], PR + "42") == (1, 0)
    assert compare(base, [*base, entry("config-b", PR + "XXX")], PR + "42") == (1, 0)


def test_wrong_pr_link_on_append_rejected():
    base = [entry("config-a")]
    with pytest.raises(ServelabError, match="must be .*pull/42 or XXX"):
        compare(base, [*base, entry("config-b", PR + "41")], PR + "42")


def test_main_branch_needs_a_pull_request_link():
    base = [entry("config-a")]
    with pytest.raises(ServelabError, match="must be a GitHub pull request URL"):
        compare(base, [*base, entry("config-b", "XXX")], None)


def test_pr_link_only_correction_allowed():
    assert compare([entry("config-a", "XXX")], [entry("config-a", PR + "42")], PR + "99") == (0, 1)


def test_existing_content_change_rejected():
    head = [entry("config-a")]
    head[0]["description"] = ["Different description"]
    with pytest.raises(ServelabError, match="entry 1 changed"):
        compare([entry("config-a")], head, PR + "42")


def test_deleted_entry_rejected():
    with pytest.raises(ServelabError, match="entries were deleted"):
        compare([entry("config-a")], [], PR + "42")


def test_correction_mixed_with_append_rejected():
    head = [entry("config-a", PR + "42"), entry("config-b", "XXX")]
    with pytest.raises(ServelabError, match="do not mix"):
        compare([entry("config-a", "XXX")], head, PR + "42")


def test_append_keeps_history_bytes():
    base = render([entry("config-a")])
    appended = base + b"\n" + render([entry("config-b", "XXX")])
    check_bytes(base, appended, 1, 0, "t")
    with pytest.raises(ServelabError, match="bytes of history"):
        check_bytes(base, appended.replace(b"Update config-a", b"Update config-a "), 1, 0, "t")


def test_append_needs_one_separator_and_one_final_newline():
    base = render([entry("config-a")])
    first, second = render([entry("config-b", "XXX")]), render([entry("config-c", "XXX")])
    with pytest.raises(ServelabError, match="exactly one empty line"):
        check_bytes(base, base + b"\n" + first + b"\n\n" + second, 2, 0, "t")
    with pytest.raises(ServelabError, match="exactly one newline"):
        check_bytes(base, base + b"\n" + first + b"\n", 1, 0, "t")


def test_correction_refuses_whitespace_change_of_history():
    base = render([entry("config-a", "XXX")])
    corrected = base.replace(b"  pr-link: XXX\n", b"  pr-link: " + PR.encode() + b"42\n")
    check_bytes(base, corrected, 0, 1, "t")
    with pytest.raises(ServelabError, match="outside a pr-link line"):
        check_bytes(base, corrected.replace(b"  - Update config-a\n", b"  - Update config-a  \n"), 0, 1, "t")


def test_append_refuses_historical_whitespace_change():
    """test_prepare_perf_changelog_merge: a trailing space added to history, with an entry appended."""
    block = b'- config-keys:\n    - %s\n  description:\n    - "Update %s"\n  pr-link: XXX\n'
    base = block % (b"historical", b"historical")
    head = base.replace(b'"Update historical"\n', b'"Update historical"  \n') + b"\n"
    head += block % (b"new-config", b"new-config")
    with pytest.raises(ServelabError, match="history"):
        merge_rules(base, head, PR + "42", "head", "base", Entry)


class Blob:
    def __init__(self, data: bytes):
        self.label, self.data = "ref", data

    def read_bytes(self, name: str) -> bytes:
        return self.data


def gate(base: bytes, head: bytes, **rules) -> Change:
    store = open_store()  # the shipped recipes: their keys resolve, their jobs generate
    return Change(store, store, ledger=(Blob(base), Blob(head), "perf-changelog.yaml"), **rules)


SHIPPED = entry("dsv4f-fp8-b200-vllm", "XXX")


def test_gate_refuses_missing_final_newline():
    (p,) = gate(b"", b"- config-keys: []").problems
    assert "does not end with a newline" in p


def test_gate_refuses_what_does_not_generate():
    """InferenceX's gate fails when process_changelog.py does: here a key no recipe has."""
    (p,) = gate(b"", render([entry("config-a", "XXX")])).problems
    assert "config key 'config-a' is not a config key" in p


def test_gate_forwards_eval_modifiers():
    head = render([SHIPPED])
    plain, evals_only = gate(b"", head), gate(b"", head, evals_only=True)
    assert plain.problems == [] and evals_only.problems == []
    assert plain.jobs.bench and plain.jobs.evals
    assert evals_only.jobs.bench == [] and [j.row for j in evals_only.jobs.evals] == [
        j.row for j in plain.jobs.evals
    ]
    all_evals = gate(b"", head, all_evals=True)
    assert len(all_evals.jobs.evals) > len(plain.jobs.evals)


def test_gate_refuses_a_deleted_line():
    """The PR 1717 case: a conflict resolution that dropped a line of history (here a pr-link)."""
    base = render([entry("dsv4f-fp8-b200-vllm", PR + "1798")])
    head = render([entry("dsv4f-fp8-b200-vllm", PR + "1717")]) + b"\n" + render([SHIPPED])
    problems = gate(base, head).problems
    assert len(problems) == 1 and "deletes a line ('pr-link: " + PR + "1798')" in problems[0]


def test_gate_allows_deleting_whitespace_only_lines():
    """InferenceX's history has whitespace-only separator lines; its gate lets a change drop them."""
    base = render([entry("dsv4f-fp8-b200-vllm", PR + "1")]) + b"  \n"
    head = render([entry("dsv4f-fp8-b200-vllm", PR + "1")]) + b"\n" + render([SHIPPED])
    change = gate(base, head)
    assert change.problems == [] and len(change.added) == 1
    with pytest.raises(ServelabError, match="changed the bytes of history"):
        merge_rules(base, head, PR + "42", "head", "base", Entry)


def test_gate_takes_entries_inserted_inside_history():
    """Real main-branch merges insert entries before the last ones; the gate reads the added lines."""
    old = render([entry("dsv4f-fp8-b200-vllm", PR + "1")])
    base = old + b"\n" + render([entry("dsv4-fp4-b200-vllm", PR + "2")])
    head = old + b"\n" + render([SHIPPED]) + b"\n" + render([entry("dsv4-fp4-b200-vllm", PR + "2")])
    change = gate(base, head)
    assert change.problems == [] and [e.config_keys for e in change.added] == [["dsv4f-fp8-b200-vllm"]]
    with pytest.raises(ServelabError, match="entry 2 changed"):
        merge_rules(base, head, None, "head", "base", Entry)
