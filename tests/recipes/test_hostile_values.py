"""Hostile recipe values: refused when the field has a pattern, carried intact in every output format when it
is free text. Generated scripts are really run, with a fake `servelab` on PATH, to show an injected `touch`
never runs and that the job `servelab run` reads holds every value as it was (it reaches the engine as an
argv element, never through a shell)."""

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from clirun import servelab
from quick_diagonal import pairs

from servelab.errors import ServelabError
from servelab.recipes.changelog import Change, jobs_for
from servelab.recipes.emit import emit
from servelab.recipes.filters import Filters
from servelab.recipes.pipelines import (
    HEREDOC,
    JOB_FILE,
    run_argv,
    script,
    to_buildkite,
    to_github,
    to_json,
)
from servelab.recipes.recipe_store import DATA_DIR, open_store
from servelab.recipes.sweep import expand
from servelab.run.build import read_job
from servelab.run.plan import from_job
from servelab.run.server import docker_argv

KEY = "dsv4f-fp8-b200-vllm"
MARKER = "PWNED"
# Each tries to run `touch PWNED` in the generated script (or in a GitHub workflow that interpolates it).
HOSTILE = [
    f"x\ntouch {MARKER}",
    f"x\r\ntouch {MARKER}",
    f"x; touch {MARKER}",
    f"x && touch {MARKER} #",
    f"$(touch {MARKER})",
    f"`touch {MARKER}`",
    f"x' ; touch {MARKER}; '",
    f'x" ; touch {MARKER}; "',
    "${{ github.event.issue.title }}",
    f"x\u2028touch {MARKER}",
    f"x\u0085touch {MARKER}",
    f"x\x00touch {MARKER}",
]
# Hostile values without control characters: what free-text fields accept (and must quote).
SHELL_HOSTILE = [v for v in HOSTILE if v.isprintable()]


def _recipes_file(store_dir: Path) -> Path:
    return store_dir / "recipes" / "b200.yaml"


def _edit(store_dir: Path, change) -> None:
    """Apply `change(file mapping)` to the recipes file and write it back through a YAML dumper."""
    p = _recipes_file(store_dir)
    data = yaml.safe_load(p.read_text())
    change(data)
    p.write_text(yaml.safe_dump(data, sort_keys=False))  # escapes: every character arrives as written


@pytest.fixture(scope="module")
def module_store(tmp_path_factory) -> Path:
    """One copy of the shipped store for the module's tests that edit only the recipes file (a copy is about
    40 ms of CPU, mostly the srt-slurm recipes; over 200 tests here edit the file once each)."""
    d = tmp_path_factory.mktemp("store") / "store"
    shutil.copytree(DATA_DIR, d)
    return d


@pytest.fixture
def edited_store(module_store: Path) -> Iterator[Path]:
    """The module's copy of the store; the recipes file the test edits is put back as shipped after it."""
    p = _recipes_file(module_store)
    shipped = p.read_bytes()
    yield module_store
    p.write_bytes(shipped)


def _set(path: str, value):
    """A change that sets a dotted field of KEY's recipe."""

    def change(data):
        *parents, last = path.split(".")
        node = data[KEY]
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value

    return change


def _rename_scenario(value):
    def change(data):
        data[KEY]["scenarios"] = {value: data[KEY]["scenarios"]["fixed-seq-len"]}

    return change


def _rename_key(value):
    def change(data):
        data[value] = data.pop(KEY)

    return change


def _setter(path: str):
    return lambda value: _set(path, value)


PATTERN_FIELDS = {
    **{
        f: _setter(f)
        for f in (
            "image",
            "model",
            "model-prefix",
            "runner",
            "precision",
            "framework",
            "revision",
            "engine.kv-cache-dtype",
            "engine.tool-call-parser",
            "engine.cuda-home",
            "client.result-dir",
        )
    },
    "secret-env": lambda v: _set("secret-env", [v]),
    "env name": lambda v: _set("env", {v: "1"}),
    "evals task": lambda v: _set("evals", [{"kind": "lm-eval", "task": v, "num-fewshot": 5}]),
    "scenario type": _rename_scenario,
    "config key": _rename_key,
}


# every hostile value in every field for CI, a diagonal for the quick tier (quick_diagonal.py); ids as
# before: the value's index, then the field
@pytest.mark.parametrize(("value", "field"), pairs(HOSTILE, PATTERN_FIELDS, row_ids=range(len(HOSTILE))))
def test_patterned_fields_refuse_hostile_values(edited_store, field, value):
    _edit(edited_store, PATTERN_FIELDS[field](value))
    with pytest.raises(ServelabError) as info:
        open_store(edited_store)
    msg = str(info.value)
    # (YAML itself reads U+0085 as a line break, so the value may arrive folded: match the message, not it)
    assert "\n" not in msg and "b200.yaml" in msg and " is not " in msg


def test_validate_command_refuses_newline_image_and_shell_secret_name(store_dir):
    for change in (_set("image", f"vllm/vllm-openai:v1\ntouch {MARKER}"), _set("secret-env[]", "X;touch Y")):
        _edit(store_dir, change)
        r = servelab("recipes", "validate", "--dir", str(store_dir))
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
        assert "image" in r.stderr or "secret-env" in r.stderr


FREE_TEXT_FIELDS = {
    "engine.extra-args": lambda v: _set("engine.extra-args", ["--served-model-name", v]),
    "env value": lambda v: _set("env", {"VLLM_HOSTILE": v}),
    "compilation-config": lambda v: _set("engine.compilation-config", {"level": v}),
    "attention-config": lambda v: _set("engine.attention-config", {"use_fp4_indexer_cache": True, "x": v}),
}


@pytest.mark.parametrize("field", list(FREE_TEXT_FIELDS))
@pytest.mark.parametrize("value", [v for v in HOSTILE if not v.isprintable()], ids=lambda v: repr(v)[:12])
def test_free_text_refuses_control_characters(edited_store, field, value):
    _edit(edited_store, FREE_TEXT_FIELDS[field](value))
    with pytest.raises(ServelabError) as info:
        open_store(edited_store)
    assert "control character" in str(info.value) and "\n" not in str(info.value)


FAKE = """\
#!{python}
# Stands in for `{name}`: records its argv and environment, and (as the server) runs until killed.
import json, os, sys, time
with open("{name}.calls", "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ)}}) + "\\n")
if {serve} and sys.argv[1:2] != ["rm"]:  # `docker rm -f` in the teardown returns at once
    time.sleep(600)
"""


@pytest.fixture
def fake_bin(tmp_path) -> dict:
    """PATH with fake vllm, docker (servers), servelab, lm_eval and curl."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, serve in (("vllm", True), ("docker", True), ("servelab", False), ("lm_eval", False)):
        (bindir / name).write_text(FAKE.format(python=sys.executable, name=name, serve=serve))
    # healthy once the fake server has recorded its call
    (bindir / "curl").write_text(
        "#!/bin/sh\nfor i in $(seq 300); do\n  [ -e vllm.calls ] || [ -e docker.calls ] && exit 0\n"
        "  sleep 0.1\ndone\nexit 7\n"
    )
    for f in bindir.iterdir():
        f.chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}


def _run_script(text: str, work: Path, env: dict) -> None:
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    work.mkdir()
    r = subprocess.run(["bash", "-c", text], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not (work / MARKER).exists() and not (work.parent / MARKER).exists()


def _calls(work: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (work / f"{name}.calls").read_text().splitlines()]


@pytest.mark.parametrize(
    ("value", "field"), pairs(SHELL_HOSTILE, FREE_TEXT_FIELDS, row_ids=range(len(SHELL_HOSTILE)))
)
def test_free_text_is_quoted_in_every_format(edited_store, tmp_path, fake_bin, field, value):
    _edit(edited_store, FREE_TEXT_FIELDS[field](value))
    jobs = expand(open_store(edited_store), [KEY], Filters(mode="test-config", conc=[16], all_evals=True))
    job = jobs[0]
    in_json = json.dumps(value)[1:-1]  # inside a JSON config flag
    assert any(value in a or in_json in a for a in job.launch.argv) or job.launch.env["VLLM_HOSTILE"] == value

    for launcher in ("direct", "docker"):
        text = script(job, launcher)
        work = tmp_path / f"work-{launcher}"
        _run_script(text, work, fake_bin)
        assert ["servelab", *_calls(work, "servelab")[0]["argv"]] == run_argv(job, launcher)
        assert json.loads((work / JOB_FILE).read_text()) == json.loads(json.dumps(job.to_json()))
        plan = from_job(read_job(work / JOB_FILE, None), JOB_FILE)  # what `servelab run --job` starts
        assert plan.server.argv == job.launch.argv and plan.server.env == job.launch.env
        assert [t.name for t in plan.lm_tasks] == [e.task for e in job.evals]
        assert [e.argv()[e.argv().index("--tasks") + 1] for e in job.evals] == [e.task for e in job.evals]
        if launcher == "docker":
            argv = docker_argv(plan.server, "c", work, work)
            assert argv[-len(job.launch.argv) + 1 :] == job.launch.argv[1:]
            assert all(f"{k}={v}" in argv for k, v in job.launch.env.items())

        steps = yaml.safe_load(to_buildkite(jobs, launcher))["steps"]
        # The agent substitutes $VAR on upload; every $ is escaped as $$, which it turns back into $.
        assert "$" not in steps[0]["command"].replace("$$", "")
        assert steps[0]["command"].replace("$$", "$") == text

    rows = json.loads(to_json(jobs))
    assert rows[0]["launch"] == job.launch.model_dump()
    matrix = to_github(jobs)
    assert "${{" not in matrix and value not in json.loads(matrix)["evals"]["include"][0].values()


def test_sh_scripts_written_per_job_run_clean(store_dir, tmp_path, fake_bin):
    _edit(store_dir, FREE_TEXT_FIELDS["engine.extra-args"](f"$(touch {MARKER})"))
    jobs = expand(open_store(store_dir), [KEY], Filters(mode="test-config", conc=[1, 64]))
    listing = emit(jobs, "sh", tmp_path / "scripts").split()
    assert len(listing) == len(jobs) == 3  # the arm running 1..64 at both, the arm running 64..256 at 64
    for i, path in enumerate(listing):
        _run_script(Path(path).read_text(), tmp_path / f"w{i}", fake_bin)


def test_heredoc_delimiter_inside_a_file_cannot_end_it(shipped, tmp_path, fake_bin):
    job = expand(shipped, [KEY], Filters(mode="test-config", conc=[1]))[0]
    content = f"a: 1\n{HEREDOC}\ntouch {MARKER}\n{HEREDOC}_1\n"
    job.launch.files["options.yml"] = content
    work = tmp_path / "work"
    _run_script(script(job), work, fake_bin)
    assert read_job(work / JOB_FILE, None).launch.files["options.yml"] == content


def test_changelog_jobs_quote_free_text(repo, fake_bin, tmp_path):
    base = repo.commit("base")
    _edit(repo.data, FREE_TEXT_FIELDS["engine.extra-args"](f"x' ; touch {MARKER}; '"))
    repo.relock()
    repo.append(f"\n- config-keys:\n    - {KEY}\n  description:\n    - hostile\n  pr-link: XXX\n")
    repo.commit("entry")
    change = Change(open_store("data", ref=base), open_store("data", ref="HEAD"))
    assert change.problems == []
    jobs = jobs_for(change).all()
    _run_script(script(jobs[0]), tmp_path / "work", fake_bin)
    steps = yaml.safe_load(emit(jobs, "buildkite"))["steps"]
    assert steps[0]["command"].replace("$$", "$") == script(jobs[0])
