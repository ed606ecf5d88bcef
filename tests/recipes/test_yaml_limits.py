"""YAML bombs and runaway sweeps: bounded reading (size, depth, aliases, expanded nodes) and a job cap, each
refused with one line and exit code 2 before memory runs out."""

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from servelab.errors import ServelabError
from servelab.recipes import yamlio
from servelab.recipes.filters import Filters
from servelab.recipes.ladder import ladder
from servelab.recipes.sweep import expand
from servelab.recipes.yamlio import MAX_BYTES, load_yaml, read_yaml


def run(*args, cwd=None):
    # The timeout is a hang guard: each of these fails in well under a second when the limits hold.
    return subprocess.run(
        [sys.executable, "-m", "servelab.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def billion_laughs() -> str:
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 9):
        prev, cur = chr(96 + i), chr(97 + i)
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


RECIPE_HEAD = """\
bomb-fp8-h200-vllm:
  image: vllm/vllm-openai:v0.25.0
  model: meta-llama/Llama-3.1-70B-Instruct
  model-prefix: llama70b
  runner: cluster:h200-nb
  precision: fp8
  framework: vllm
"""


def million_arms() -> str:
    """A ~24 KB recipe file whose aliases stand for a million search-space arms."""
    arms = ", ".join(["*arm"] * 2000)
    seqs = ", ".join(["*seq"] * 500)
    return (
        "x-arm: &arm {tp: 8, conc-list: [1]}\n"
        f"x-seq: &seq {{isl: 1024, osl: 1024, search-space: [{arms}]}}\n"
        + RECIPE_HEAD
        + f"  scenarios:\n    fixed-seq-len: [{seqs}]\n"
    )


def test_anchor_bomb_is_refused():
    text = billion_laughs()
    assert len(text) < 1024
    with pytest.raises(ServelabError, match="bomb.yaml: expands to more than"):
        load_yaml(text, "bomb.yaml")


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 50_000 + "]" * 50_000, "nested more than"),
        ("".join("  " * i + f"k{i}:\n" for i in range(500)), "nested more than"),
        ("&a [*a]", "refers to a collection that contains it"),
        ("x: &x 1\n" + "".join(f"k{i}: *x\n" for i in range(2000)), "more than 1000 aliases"),
        ("? [a]\n: 1\n", "found unhashable key"),
        ("a: \x00\n", "unacceptable character"),
    ],
    ids=["deep-flow", "deep-block", "recursive-alias", "many-aliases", "unhashable-key", "nul"],
)
def test_shapes_that_break_the_parser_are_refused(text, message):
    with pytest.raises(ServelabError, match=message) as info:
        load_yaml(text, "f.yaml")
    assert "\n" not in str(info.value)


def test_alias_fan_out_is_counted_expanded():
    # 900 aliases, each to a 30-arm list, stand for 27,000 arms of 1,000 nodes each
    text = "arm: &arm {tp: 8, conc-list: [" + ", ".join(["1"] * 200) + "]}\n"
    text += "arms: &arms [" + ", ".join(["*arm"] * 30) + "]\n"
    text += "".join(f"k{i}: *arms\n" for i in range(900))
    with pytest.raises(ServelabError, match="expands to more than 500000 nodes"):
        load_yaml(text, "f.yaml")


@pytest.mark.parametrize("aliases", [False, True])
def test_one_node_over_the_limit_is_refused_with_aliases_or_without(aliases, monkeypatch):
    """Without an alias the nodes composed are the expanded count (nothing else walks the tree): one node
    over the limit is refused, the limit itself read, as where aliases are counted expanded."""
    limit = 1000
    monkeypatch.setattr(yamlio, "MAX_NODES", limit)
    items = ["0"] * (limit - 1) if not aliases else ["&z 0", *["*z"] * (limit - 2)]
    at_limit = "[" + ", ".join(items) + "]"  # the list and its items: the limit
    assert len(load_yaml(at_limit, "f.yaml")) == limit - 1
    with pytest.raises(ServelabError, match=f"f.yaml: expands to more than {limit} nodes"):
        load_yaml("[0, " + at_limit[1:], "f.yaml")


def test_aliases_within_limits_still_work():
    assert load_yaml("x: &x {a: 1}\ny: {<<: *x, b: 2}\n", "f.yaml") == {"x": {"a": 1}, "y": {"a": 1, "b": 2}}


IX_CONFIGS = Path(__file__).resolve().parents[1] / "data" / "inferencex" / "configs"


@pytest.mark.parametrize("name", ["nvidia-master.yaml", "amd-master.yaml", "runners.yaml"])
def test_files_read_as_inferencex_reads_them(name):
    """load_yaml parses with libyaml where PyYAML has it; the answer is what InferenceX's own loader
    (yaml.safe_load, PyYAML's Python parser) reads."""
    text = (IX_CONFIGS / name).read_text()
    assert load_yaml(text, name, []) == yaml.safe_load(text)


@pytest.mark.parametrize(
    "text, message",
    [
        ("a:\tb\n", "f.yaml: line 1 is not valid YAML (found character '\\t' that cannot start any token)"),
        (
            "a: [1,\t2]\n",
            "f.yaml: line 1 is not valid YAML (found character '\\t' that cannot start any token)",
        ),
        ("a: [1, 2\nb: 3\n", "f.yaml: line 2 is not valid YAML (expected ',' or ']', but got ':')"),
    ],
    ids=["tab-after-colon", "tab-in-flow", "unclosed-flow"],
)
def test_refused_as_pyyaml_refuses_in_its_words(text, message):
    """libyaml takes a tab as a separator where PyYAML's Python parser refuses it, and words its errors its
    own way: both are refused, as before, with the Python parser's line and words."""
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(text)
    with pytest.raises(ServelabError) as info:
        load_yaml(text, "f.yaml")
    assert str(info.value) == message


def test_oversized_file_is_refused(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("# filler\n" * (MAX_BYTES // 9 + 1))
    with pytest.raises(ServelabError, match="big.yaml: larger than .* bytes, the most a YAML file may hold"):
        read_yaml(p)


@pytest.mark.slow  # 2.0 s of CPU a case: a million-arm file through two CLI processes
def test_million_arm_file_fails_validate_and_sweep(store_dir, tmp_path):
    text = million_arms()
    assert len(text) < 24 * 1024
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(text)
    r = run("recipes", "validate", str(bomb))
    assert r.returncode == 2 and "bomb.yaml: more than 1000 aliases" in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1
    (store_dir / "recipes" / "bomb.yaml").write_text(text)
    r = run("sweep", "--dir", str(store_dir), "--format", "json")
    assert r.returncode == 2 and "bomb.yaml: more than 1000 aliases" in r.stderr, r.stderr


def test_job_cap_names_the_recipe_and_count(shipped):
    full = expand(shipped)
    with pytest.raises(ServelabError) as info:
        expand(shipped, filters=Filters(max_jobs=10))
    msg = str(info.value)
    assert f"expands to {len(full)} jobs" in msg and "above the limit of 10" in msg and "--max-jobs" in msg
    counts = Counter(j.key for j in full)  # in store order: the first of equal counts is named
    biggest = max(counts, key=lambda k: counts[k])
    assert msg.startswith(f"{biggest}: ") and f"({counts[biggest]} from this recipe)" in msg
    assert len(expand(shipped, filters=Filters(max_jobs=len(full)))) == len(full)


@pytest.mark.slow  # 600 arms counted through the CLI (4-20 s); quick: test_job_cap_names_the_recipe_and_count
def test_job_cap_from_the_command_line(store_dir):
    arms = "\n".join(f"      - {{tp: 8, conc-start: 1, conc-end: {2**19 + i}}}" for i in range(600))
    (store_dir / "recipes" / "wide.yaml").write_text(
        RECIPE_HEAD.replace("bomb-", "wide-")
        + f"  scenarios:\n    fixed-seq-len:\n    - isl: 1024\n      osl: 1024\n      search-space:\n{arms}\n"
    )
    r = run("sweep", "wide-*", "--dir", str(store_dir))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    n = sum(len(ladder(1, 2**19 + i)) for i in range(600))
    assert f"wide-fp8-h200-vllm: the sweep expands to {n} jobs ({n} from this recipe)" in r.stderr
    assert "above the limit of 10000" in r.stderr and "--max-jobs" in r.stderr
    r = run("sweep", "wide-*", "--dir", str(store_dir), "--max-jobs", "0")
    assert r.returncode == 2 and "--max-jobs" in r.stderr
    r = run("sweep", "--dir", str(store_dir), "--max-jobs", "20", "--seq-lens", "8k1k")
    assert r.returncode == 2 and "above the limit of 20" in r.stderr
