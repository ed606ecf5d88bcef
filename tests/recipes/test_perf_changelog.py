"""Every changelog rule, each broken once in a temporary git repo, with the message it must give."""

import pytest

from servelab.errors import ServelabError
from servelab.recipes.changelog import Change, jobs_for
from servelab.recipes.store import open_store

GOOD = """
- config-keys:
    - dsv4f-fp8-b200-vllm
  description:
    - "Raise max-num-seqs"
  pr-link: XXX
"""


def change(repo, base, head="HEAD", pr_link=None):
    return Change(open_store("data", ref=base), open_store("data", ref=head), pr_link=pr_link)


def edit_recipe(repo, old="max-num-seqs: 256", new="max-num-seqs: 512"):
    p = repo.data / "recipes" / "b200.yaml"
    p.write_text(p.read_text().replace(old, new, 1))


@pytest.fixture
def base(repo):
    return repo.commit("base")


def test_shipped_store_passes_from_empty_history(repo):
    (repo.changelog).rename(repo.data / "cl.bak")
    (repo.data / "fingerprints.lock").unlink()
    empty = repo.commit("empty")
    (repo.data / "cl.bak").rename(repo.changelog)
    repo.relock()
    repo.commit("seed")
    c = change(repo, empty)
    assert c.problems == [] and len(c.added) == 3


def test_good_change_passes(repo, base):
    edit_recipe(repo)
    repo.relock()
    repo.append(GOOD)
    repo.commit()
    c = change(repo, base)
    assert c.problems == [] and [e.config_keys for e in c.added] == [["dsv4f-fp8-b200-vllm"]]
    jobs = jobs_for(c.head, c.added)
    assert {j.key for j in jobs} == {"dsv4f-fp8-b200-vllm"} and len(jobs) == 10


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


def problems_after(repo, base, text, pr_link=None, append=True):
    if append:
        repo.append(text)
    else:
        repo.changelog.write_bytes(text if isinstance(text, bytes) else text.encode())
    repo.commit()
    return change(repo, base, pr_link=pr_link).problems


@pytest.mark.parametrize(
    "bad,message",
    [
        (GOOD.replace("Raise", "Raise\r"), "contains a carriage return (CR)"),
        (GOOD.replace("  pr-link", "\tpr-link"), "contains a tab"),
        (GOOD.replace("Raise", "Ra\x00ise"), "contains a NUL"),
        (GOOD.rstrip("\n"), "does not end with a newline"),
        (GOOD.replace("  pr-link: XXX", "  pr-link: XXX\n  pr-link: XXX"), "duplicate key 'pr-link'"),
        (
            GOOD.replace("- dsv4f-fp8-b200-vllm", "- dsv4f-fp8-b200-vlm"),
            "config key 'dsv4f-fp8-b200-vlm' matches no recipe (did you mean dsv4f-fp8-b200-vllm",
        ),
        (GOOD.replace("- dsv4f-fp8-b200-vllm", '- "*-gb300-*"'), "config key '*-gb300-*' matches no recipe"),
        (
            GOOD.replace("pr-link: XXX", "pr-link: https://github.com/org/repo/issues/5"),
            "must be XXX or a GitHub pull URL",
        ),
        (GOOD.replace("pr-link: XXX", "pr-link: xxx"), "pr-link 'xxx' must be"),
        ("\n" + GOOD, "exactly one blank line (found 2)"),
        (GOOD.lstrip("\n"), "exactly one blank line (found 0)"),
        (GOOD + GOOD, ""),  # two well-formed entries are fine (checked below)
        (
            GOOD.replace("  pr-link: XXX", "  pr-link: XXX\n  evals-only: true\n  append-only: true"),
            "append-only cannot be combined with evals-only or all-evals",
        ),
        (
            GOOD.replace("  pr-link: XXX", "  pr-link: XXX\n  priority: high"),
            "priority: Extra inputs are not permitted",
        ),
        (GOOD.replace('    - "Raise max-num-seqs"\n', ""), "description"),
    ],
)
def test_rule_breaks(repo, base, bad, message):
    problems = problems_after(repo, base, bad)
    if not message:
        assert problems == []
        return
    assert any(message in p for p in problems), problems
    assert all("perf-changelog.yaml" in p for p in problems), problems


def test_not_utf8(repo, base):
    problems = problems_after(
        repo, base, repo.changelog.read_bytes() + "\n- x: caf\xe9\n".encode("latin-1"), append=False
    )
    assert len(problems) == 1 and problems[0].startswith("HEAD:data/perf-changelog.yaml: not UTF-8 (byte ")


def test_history_is_immutable(repo, base):
    text = repo.changelog.read_text().replace("Add the DeepSeek-V4 B200", "Add the DeepSeek V4 B200")
    problems = problems_after(repo, base, text, append=False)
    assert len(problems) == 1 and "history is immutable; only pr-link values may be corrected" in problems[0]
    assert ":5:" in problems[0]  # the description line that changed


def test_entries_cannot_be_removed(repo, base):
    text = repo.changelog.read_text()
    problems = problems_after(repo, base, text[: text.index("\n\n- ") + 1], append=False)
    assert problems and "history is immutable" in problems[0]


def test_link_correction_alone_passes(repo, base):
    text = repo.changelog.read_text().replace(
        "pr-link: XXX", "pr-link: https://github.com/acme/servelab/pull/12", 1
    )
    assert problems_after(repo, base, text, append=False) == []


def test_link_correction_must_be_a_pull_url(repo, base):
    text = repo.changelog.read_text().replace("pr-link: XXX", "pr-link: see slack", 1)
    problems = problems_after(repo, base, text, append=False)
    assert problems and "corrected pr-link 'see slack' is not a GitHub pull request URL" in problems[0]


def test_link_correction_and_new_entries_not_mixed(repo, base):
    text = repo.changelog.read_text().replace(
        "pr-link: XXX", "pr-link: https://github.com/acme/servelab/pull/12", 1
    )
    problems = problems_after(repo, base, text + GOOD, append=False)
    assert problems and "correct pr-links in a change of their own" in problems[0]


def test_new_entry_uses_this_changes_own_url(repo, base):
    own = "https://github.com/acme/servelab/pull/77"
    edit_recipe(repo)
    repo.relock()
    repo.append(GOOD.replace("XXX", "https://github.com/acme/servelab/pull/76"))
    repo.commit()
    (p,) = change(repo, base, pr_link=own).problems
    assert f"must be XXX or {own}" in p
    assert change(repo, base).problems == []  # without --pr-link any pull URL of the right form is accepted


def test_bad_ref(repo, base):
    with pytest.raises(ServelabError, match="does not name a commit"):
        change(repo, "no-such-ref")


def test_jobs_honour_entry_options(repo, base):
    edit_recipe(repo)
    repo.relock()
    repo.append(GOOD.replace("  pr-link: XXX", "  pr-link: XXX\n  evals-only: true"))
    repo.append(
        GOOD.replace("dsv4f-fp8-b200-vllm", "llama70b-fp8-h200-vllm").replace(
            "  pr-link: XXX", "  pr-link: XXX\n  append-only: true\n  scenario-type: fixed-seq-len"
        )
    )
    repo.commit()
    c = change(repo, base)
    assert c.problems == []
    jobs = jobs_for(c.head, c.added)
    dsv4f = [j for j in jobs if j.key == "dsv4f-fp8-b200-vllm"]
    llama = [j for j in jobs if j.key == "llama70b-fp8-h200-vllm"]
    assert dsv4f and all(j.row["run-eval"] for j in dsv4f)
    assert len(llama) == 36 and all(j.row.get("append-only") for j in llama)
