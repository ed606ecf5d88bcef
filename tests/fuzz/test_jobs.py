"""Hand-edited job files and workloads for `servelab run`: a sweep job (`servelab sweep --format json`) with
any field deleted or replaced, launch files that would escape the run folder (absolute paths, `..`), nonsense
that would make CI lie (`--stages ,` running nothing, a billion repetitions). Each is refused in one line
naming the field, or planned; none writes outside the run folder, with --docker or without."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

import pytest
from fuzzkit import hostile, tiny_workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

JOB = {
    "job-format": 2, "config-key": "k", "image": "vllm/vllm-openai:v0.25.0", "model": "m",
    "model-prefix": "m",
    "precision": "fp8", "framework": "vllm", "runner": "cluster:h200", "isl": 8, "osl": 2, "tp": 1, "pp": 1,
    "dcp-size": 1, "pcp-size": 1, "conc": 1, "ep": 1, "dp-attn": False, "spec-decoding": "none",
    "max-model-len": 64, "exp-name": "m_8", "disagg": False, "run-eval": False, "fingerprint": "sha256:0",
    "image-digest": None,
    "launch": {"argv": ["vllm", "serve", "m", "--port", "8000"], "env": {}, "files": {}, "port": 8000,
               "health_path": "/health"},
    "not-renderable": None, "secret-env": [],
    "benches": [{"base_url": "http://localhost:8000", "model": "m", "dataset_name": "random",
                 "random_input_len": 8, "random_output_len": 2, "random_range_ratio": 0.0, "num_prompts": 2,
                 "max_concurrency": 1, "num_warmups": 0, "ignore_eos": True,
                 "save_result": True, "result_dir": "results", "result_filename": "r.json"}],
    "evals": [], "assertions": {}, "queue": "q", "agents": {},
}  # fmt: skip


def _job(tmp_path: Path, job: dict) -> Path:
    f = tmp_path / "job.json"
    f.write_text(json.dumps(job))
    return f


def test_the_job_is_a_valid_one(tmp_path):
    hostile("run", "--job", str(_job(tmp_path, JOB)), "--dry-run", codes=(0,))


ESCAPES = {
    "absolute": "/tmp/servelab-escape-{n}",
    "dotdot": "../servelab-escape-{n}",
    "dotdot-inside": "a/../../servelab-escape-{n}",
    "deep-dotdot": "a/b/../../../servelab-escape-{n}",
    "dot": ".",
    "empty": "",
    "nul": "a\x00b",
    "home": "~/servelab-escape-{n}",
    "backslash-dotdot": "..\\servelab-escape-{n}",
    "trailing-slash": "dir/",
}


@pytest.mark.parametrize("docker", [False, True], ids=["host", "docker"])
@pytest.mark.parametrize("name", list(ESCAPES))
def test_launch_files_stay_in_the_run_folder(name, docker, tmp_path):
    token = uuid.uuid4().hex
    rel = ESCAPES[name].format(n=token)
    job = copy.deepcopy(JOB)
    job["launch"]["files"] = {rel: "escaped"}
    job["image-digest"] = "sha256:" + "a" * 64
    f = _job(tmp_path, job)
    store = tmp_path / "store" / "r.db"
    args = ["run", "--job", str(f), "--store", str(store), "--server-timeout", "5", *(["--docker"] * docker)]
    try:
        r = hostile(*args, names=["files"], cwd=tmp_path, keep=[f])
        assert "launch" in r.err, r.err
    finally:
        written = [p for p in (*Path("/tmp").glob(f"*{token}*"), *tmp_path.rglob(f"*{token}*"))]
        for p in written:
            p.unlink()
    assert not written, f"{written} written outside the run folder"


FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
PATHS = (
    [(k,) for k in JOB]
    + [("launch", k) for k in JOB["launch"]]
    + [("benches", 0, k) for k in JOB["benches"][0]]
)


@pytest.mark.slow  # 1.1 s of CPU a case: every hand edit through the job readers
@FUZZ
@given(
    edits=st.lists(st.tuples(st.sampled_from(PATHS), st.one_of(st.just("<delete>"), json_values)), max_size=3)
)
def test_hand_edited_job_files(edits, tmp_path_factory):
    """A job of `servelab sweep --format json` with fields deleted or replaced by anything: planned, or
    refused naming the file (never a KeyError or an int('abc') as an internal error)."""
    job = copy.deepcopy(JOB)
    for path, value in edits:
        holder = job
        for key in path[:-1]:
            holder = holder[key] if isinstance(holder, dict) and key in holder else None
            if not isinstance(holder, dict | list):
                break
        else:
            if isinstance(holder, dict):
                if value == "<delete>":
                    holder.pop(path[-1], None)
                else:
                    holder[path[-1]] = value
    f = _job(tmp_path_factory.mktemp("job"), job)
    r = hostile("run", "--job", str(f), "--dry-run", codes=(0, 2), keep=[f])
    if r.code == 2:
        assert str(f) in r.err or "--job" in r.err, r.err


HAND_EDITS = {
    "tp-text": (("tp",), "abc"),
    "conc-text": (("conc",), "abc"),
    "port-text": (("launch", "port"), "abc"),
    "argv-string": (("launch", "argv"), "vllm serve m"),
    "argv-empty": (("launch", "argv"), []),
    "launch-string": (("launch",), "x"),
    "benches-dict": (("benches",), {"a": 1}),
    "bench-conc-text": (("benches", 0, "max_concurrency"), "abc"),
    "bench-prompts-huge": (("benches", 0, "num_prompts"), 10**30),
    "no-exp-name": (("exp-name",), "<delete>"),
    "no-model": (("model",), "<delete>"),
    "no-launch": (("launch",), "<delete>"),
    "no-fingerprint": (("fingerprint",), "<delete>"),
    "env-number": (("launch", "env"), {"A": 1}),
    "files-number": (("launch", "files"), {"a.txt": 5}),
    "format-3": (("job-format",), 3),
    "format-text": (("job-format",), "2"),
}


@pytest.mark.parametrize("name", list(HAND_EDITS))
def test_hand_edits(name, tmp_path):
    path, value = HAND_EDITS[name]
    job = copy.deepcopy(JOB)
    holder = job
    for key in path[:-1]:
        holder = holder[key]
    if value == "<delete>":
        del holder[path[-1]]
    else:
        holder[path[-1]] = value
    f = _job(tmp_path, job)
    hostile("run", "--job", str(f), "--dry-run", names=[str(f)], keep=[f])


@pytest.mark.parametrize("value", [",", "", " , ", ",,,"], ids=["comma", "empty", "spaces", "commas"])
def test_stages_that_name_no_stage(value, tmp_path):
    """`--stages ,` would run nothing and pass: CI would report a benchmark that never ran."""
    wl = tiny_workload(tmp_path / "wl.yaml")
    hostile("run", str(wl), "--stages", value, "--dry-run", names=["--stages"])
    hostile("run", str(wl), "--stages", value, "--base-url", "http://127.0.0.1:9", "--store",
            str(tmp_path / "s.db"), names=["--stages"])  # fmt: skip
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("value", [1_000_000_001, 1001, 0, -1, 2.5, "3"], ids=str)
def test_workload_repetitions_within_the_cli_bound(value, tmp_path):
    """The CLI caps --repetitions at 1000; the file holds the same field and must hold the same bound (a
    billion repetitions was a MemoryError)."""
    config = {"name": "s", "input_len": 8, "output_len": 2, "num_prompts": 2, "max_concurrency": 1,
              "repetitions": value}  # fmt: skip
    wl = tiny_workload(tmp_path / "wl.yaml", vllm_bench={"configs": [config]})
    hostile("run", str(wl), "--dry-run", names=["repetitions"], keep=[wl])
