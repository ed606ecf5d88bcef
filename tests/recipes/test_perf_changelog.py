"""Every changelog rule, each broken once in a temporary git repo, with the message it must give: the gate
(the default), the merge rules (strict) and servelab's fingerprint rule."""

import pytest

from servelab.errors import ServelabError
from servelab.recipes.changelog import Change
from servelab.recipes.filters import Filters
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import expand

GOOD = """
- config-keys:
    - dsv4f-fp8-b200-vllm
  description:
    - "Raise max-num-seqs"
  pr-link: XXX
"""


OWN = "https://github.com/acme/servelab/pull/77"


def change(repo, base, head="HEAD", pr_link=None, strict=False, **rules):
    return Change(
        open_store("data", ref=base), open_store("data", ref=head), pr_link=pr_link, strict=strict, **rules
    )


def edit_recipe(repo, old="max-num-seqs: 256", new="max-num-seqs: 512"):
    p = repo.data / "recipes" / "b200.yaml"
    p.write_text(p.read_text().replace(old, new, 1))


@pytest.fixture
def base(repo):
    return repo.commit("base")


@pytest.mark.slow  # 1.1 s of CPU a case: a git repository of the store
def test_shipped_store_passes_from_empty_history(repo):
    (repo.changelog).rename(repo.data / "cl.bak")
    (repo.data / "fingerprints.lock").unlink()
    empty = repo.commit("empty")
    (repo.data / "cl.bak").rename(repo.changelog)
    repo.relock()
    repo.commit("seed")
    c = change(repo, empty)
    assert c.problems == [] and len(c.added) == 5
    assert change(repo, empty, pr_link=OWN, strict=True).problems == []


def test_good_change_passes(repo, base):
    edit_recipe(repo)
    repo.relock()
    repo.append(GOOD)
    repo.commit()
    c = change(repo, base)
    assert c.problems == [] and [e.config_keys for e in c.added] == [["dsv4f-fp8-b200-vllm"]]
    assert {j.key for j in c.jobs.all()} == {"dsv4f-fp8-b200-vllm"} and len(c.jobs.bench) == 10
    assert not any(j.row["run-eval"] for j in c.jobs.bench)
    # eval jobs apart: the rows the eval policy marks, each eval-only
    marked = expand(c.head, ["dsv4f-fp8-b200-vllm"], Filters(evals_only=True))
    assert c.jobs.evals and [j.row for j in c.jobs.evals] == [{**j.row, "eval-only": True} for j in marked]


def test_unchanged_repo_passes(repo, base):
    assert change(repo, base, base).problems == []


def test_fingerprint_changed_without_entry(repo, base):
    edit_recipe(repo)
    repo.relock()
    repo.commit()
    assert change(repo, base).problems == [
        "dsv4f-fp8-b200-vllm: fingerprint changed but no new perf-changelog.yaml entry names it"
    ]


def test_stale_lock(repo, base):
    edit_recipe(repo)
    repo.append(GOOD)
    repo.commit()
    (p,) = change(repo, base).problems
    assert "dsv4f-fp8-b200-vllm: recorded fingerprint is stale" in p and "servelab recipes lock" in p


def test_new_key_needs_entry(repo, base):
    p = repo.data / "recipes" / "b200.yaml"
    text = p.read_text()
    p.write_text(
        text
        + "\n"
        + text[text.index("dsv4f-fp8-b200-vllm:") :].replace(
            "dsv4f-fp8-b200-vllm:", "dsv4f-fp8-b200-vllm-mtp:"
        )
    )
    repo.relock()
    repo.commit()
    assert change(repo, base).problems == [
        "dsv4f-fp8-b200-vllm-mtp: is new but no new perf-changelog.yaml entry names it"
    ]


def test_glob_entry_covers_changed_key(repo, base):
    edit_recipe(repo)
    repo.relock()
    repo.append(GOOD.replace("- dsv4f-fp8-b200-vllm", '- "dsv4f-*-b200-*"'))
    repo.commit()
    assert change(repo, base).problems == []


def problems_after(repo, base, text, pr_link=None, append=True, strict=False):
    if append:
        repo.append(text)
    else:
        repo.changelog.write_bytes(text if isinstance(text, bytes) else text.encode())
    repo.commit()
    return change(repo, base, pr_link=pr_link, strict=strict).problems


@pytest.mark.parametrize(
    "bad,message",
    [
        (GOOD.replace("  pr-link", "\tpr-link"), "is not valid YAML"),
        (GOOD.rstrip("\n"), "does not end with a newline"),
        (GOOD.replace("  pr-link: XXX", "  pr-link: XXX\n  pr-link: XXX"), "duplicate key 'pr-link'"),
        (
            GOOD.replace("- dsv4f-fp8-b200-vllm", "- dsv4f-fp8-b200-vlm"),
            "config key 'dsv4f-fp8-b200-vlm' is not a config key (did you mean dsv4f-fp8-b200-vllm",
        ),
        (
            GOOD.replace("- dsv4f-fp8-b200-vllm", '- "*-gb300-*"'),
            "config key '*-gb300-*' matches no config key",
        ),
        (GOOD + GOOD, ""),  # two well-formed entries are fine (checked below)
        (
            "\n" + GOOD,
            "",
        ),  # the gate reads the added lines; blank lines around them are the merge rules' concern
        (GOOD.replace("  pr-link: XXX", "  pr-link: XXX\n  scenario-type: [fixed-seq-len]"), ""),
        (
            GOOD.replace("  pr-link: XXX", "  pr-link: XXX\n  scenario-type: fixed-seq-len"),
            "scenario-type: Input should be a valid list",
        ),
        (
            GOOD.replace("  pr-link: XXX", "  pr-link: XXX\n  evals-only: true\n  append-only: true"),
            "append-only cannot be combined with evals-only",
        ),
        (
            GOOD.replace("  pr-link: XXX", "  pr-link: XXX\n  priority: high"),
            "priority: Extra inputs are not permitted",
        ),
        (GOOD.replace('    - "Raise max-num-seqs"\n', ""), "description"),
    ],
)
def test_gate_rule_breaks(repo, base, bad, message):
    edit_recipe(repo)
    repo.relock()
    problems = problems_after(repo, base, bad)
    if not message:
        assert problems == []
        return
    assert any(message in p for p in problems), problems
    assert all("perf-changelog.yaml" in p for p in problems if "fingerprint" not in p), problems


@pytest.mark.parametrize(
    "bad,message",
    [
        (GOOD.replace("Raise", "Raise\r"), "contains CR characters"),
        (GOOD.replace("Raise", "Ra\tise"), "contains tabs"),
        (GOOD.replace("Raise", "Ra\x00ise"), "contains NUL bytes"),
        (GOOD.rstrip("\n"), "does not end with a newline"),
        (
            GOOD.replace("pr-link: XXX", "pr-link: https://github.com/org/repo/issues/5"),
            f"must be {OWN} or XXX",
        ),
        (GOOD.replace("pr-link: XXX", "pr-link: xxx"), "pr-link 'xxx' must be"),
        ("\n" + GOOD, "new entries must follow history after exactly one empty line"),
        (GOOD.lstrip("\n"), "new entries must follow history after exactly one empty line"),
        (GOOD + "\n" + GOOD, "must be separated by exactly one empty line"),
        (GOOD + GOOD, ""),
        (GOOD + "\n", "the last entry must end with exactly one newline"),
    ],
)
def test_merge_rule_breaks(repo, base, bad, message):
    edit_recipe(repo)
    repo.relock()
    problems = problems_after(repo, base, bad, pr_link=OWN, strict=True)
    if not message:
        assert problems == []
        return
    assert any(message in p for p in problems), problems


def test_not_utf8(repo, base):
    text = repo.changelog.read_bytes() + "\n- x: caf\xe9\n".encode("latin-1")
    problems = problems_after(repo, base, text, append=False, strict=True)
    assert len(problems) == 1 and problems[0].startswith("HEAD:data/perf-changelog.yaml: not UTF-8 (byte ")
    (gate,) = change(repo, base).problems
    assert gate.startswith("HEAD:data/perf-changelog.yaml: not UTF-8 (byte ")


def test_history_is_immutable(repo, base):
    text = repo.changelog.read_text().replace("Add the DeepSeek-V4 B200", "Add the DeepSeek V4 B200")
    (gate,) = problems_after(repo, base, text, append=False)
    assert "deletes a line ('- \"Add the DeepSeek-V4 B200" in gate and "history is append-only" in gate
    (merge,) = change(repo, base, strict=True).problems
    assert "entry 1 changed; existing entries are immutable except for pr-link corrections" in merge


@pytest.mark.slow  # 0.8 s of CPU a case: a git repository of the store
def test_entries_cannot_be_removed(repo, base):
    text = repo.changelog.read_text()
    problems_after(repo, base, text[: text.index("\n\n- ") + 1], append=False)
    assert any("deletes a line" in p for p in change(repo, base).problems)
    assert any("entries were deleted" in p for p in change(repo, base, strict=True).problems)


def test_link_correction_alone(repo, base):
    text = repo.changelog.read_text().replace(
        "pr-link: XXX", "pr-link: https://github.com/acme/servelab/pull/12", 1
    )
    # the merge rules allow it; InferenceX's gate refuses it like any deleted line
    assert problems_after(repo, base, text, append=False, strict=True) == []
    assert any("deletes a line ('pr-link: XXX')" in p for p in change(repo, base).problems)


def test_link_correction_must_be_a_pull_url(repo, base):
    text = repo.changelog.read_text().replace("pr-link: XXX", "pr-link: see slack", 1)
    problems = problems_after(repo, base, text, append=False, strict=True)
    assert problems and "corrected pr-link 'see slack' is not a pull request URL" in problems[0]


def test_link_correction_and_new_entries_not_mixed(repo, base):
    text = repo.changelog.read_text().replace(
        "pr-link: XXX", "pr-link: https://github.com/acme/servelab/pull/12", 1
    )
    problems = problems_after(repo, base, text + GOOD, append=False, strict=True)
    assert problems and "do not mix pr-link corrections" in problems[0]


def test_new_entry_uses_this_changes_own_url(repo, base):
    edit_recipe(repo)
    repo.relock()
    repo.append(GOOD.replace("XXX", "https://github.com/acme/servelab/pull/76"))
    repo.commit()
    problems = change(repo, base, pr_link=OWN, strict=True).problems
    assert f"must be {OWN} or XXX" in problems[0]  # then the key counts as named by no new entry
    # without a PR (a change on the main branch) any pull request URL is accepted, a placeholder is not
    assert change(repo, base, strict=True).problems == []


def test_main_branch_refuses_placeholder(repo, base):
    edit_recipe(repo)
    repo.relock()
    repo.append(GOOD)
    repo.commit()
    problems = change(repo, base, strict=True).problems
    assert "pr-link 'XXX' must be a GitHub pull request URL" in problems[0]


def test_bad_ref(repo, base):
    with pytest.raises(ServelabError, match="does not name a commit"):
        change(repo, "no-such-ref")


def test_evals_only_entry_runs_only_eval_jobs(repo, base):
    edit_recipe(repo)
    repo.relock()
    repo.append(GOOD.replace("  pr-link: XXX", "  pr-link: XXX\n  evals-only: true"))
    repo.commit()
    c = change(repo, base)
    assert c.problems == [] and c.jobs.bench == []
    assert c.jobs.evals and all(j.row["run-eval"] and j.row["eval-only"] for j in c.jobs.evals)


APPEND = GOOD.replace("dsv4f-fp8-b200-vllm", "llama70b-fp8-h200-vllm").replace(
    "  pr-link: XXX", "  pr-link: XXX\n  append-only: true\n  scenario-type: [fixed-seq-len]"
)
LLAMA_TP2 = "- {tp: 2, conc-start: 4, conc-end: 64}"


def edit_llama(repo, new):
    p = repo.data / "recipes" / "h200.yaml"
    p.write_text(p.read_text().replace(LLAMA_TP2, new, 1))
    repo.relock()


def test_append_only_runs_only_new_points(repo, base):
    edit_llama(repo, "- {tp: 2, conc-start: 4, conc-end: 128}")
    repo.append(APPEND)
    repo.commit()
    c = change(repo, base)
    assert c.problems == []
    assert [(j.key, j.row["tp"], j.row["isl"], j.row["conc"]) for j in c.jobs.bench] == [
        ("llama70b-fp8-h200-vllm", 2, 1024, 128)
    ]
    assert c.jobs.evals == []


def test_append_only_may_not_remove_points(repo, base):
    edit_llama(repo, "- {tp: 2, conc-start: 4, conc-end: 32}")
    repo.append(APPEND)
    repo.commit()
    assert any("append-only may not remove" in p for p in change(repo, base).problems)


def test_append_only_stays_in_scope(repo, base):
    edit_llama(repo, "- {tp: 2, conc-start: 4, conc-end: 128}")
    edit_recipe(repo)
    repo.relock()
    repo.append(APPEND)
    repo.commit()
    problems = change(repo, base).problems
    assert any(
        "append-only changed keys its entries do not select: ['dsv4f-fp8-b200-vllm']" in p for p in problems
    )


def test_append_only_not_mixed_with_other_entries(repo, base):
    edit_llama(repo, "- {tp: 2, conc-start: 4, conc-end: 128}")
    edit_recipe(repo)
    repo.relock()
    repo.append(APPEND + GOOD)
    repo.commit()
    assert any("append-only entries cannot share a change" in p for p in change(repo, base).problems)


def test_no_lock_means_no_fingerprint_rule(repo, base):
    (repo.data / "fingerprints.lock").unlink()
    no_lock = repo.commit("no lock")
    edit_recipe(repo)
    repo.commit()
    c = change(repo, no_lock)
    assert c.problems == [] and "the fingerprint rule does not apply" in c.notes[0]


def test_trim_conc_keeps_each_curves_lowest_point(repo, base):
    edit_recipe(repo)
    repo.relock()
    repo.append(GOOD)
    repo.commit()
    bench = change(repo, base).jobs.bench
    trimmed = change(repo, base, trim_conc=True).jobs.bench
    curves = {}
    for j in bench:
        curve = (j.row["isl"], j.row["tp"], j.row["ep"], j.row["dp-attn"])
        curves[curve] = min(curves.get(curve, j.row["conc"]), j.row["conc"])
    assert len(curves) < len(bench)
    assert sorted(
        (j.row["isl"], j.row["tp"], j.row["ep"], j.row["dp-attn"], j.row["conc"]) for j in trimmed
    ) == sorted((*c, conc) for c, conc in curves.items())
