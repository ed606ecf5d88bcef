"""Output formats: JSON matrix, GitHub matrix, Buildkite pipeline, shell scripts (each job a `servelab run`;
the scripts really run, with a stand-in engine)."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from portpick import free_port

from servelab.errors import ServelabError
from servelab.recipes.emit import emit
from servelab.recipes.filters import Filters
from servelab.recipes.pipelines import (
    JOB_FILE,
    recipe_run_argv,
    run_argv,
    script,
    to_buildkite,
    to_github,
    to_json,
)
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import expand
from servelab.results.store import Store
from servelab.run.build import plan_from


@pytest.fixture
def jobs(shipped):
    return expand(shipped, ["dsv4-fp4-b200-vllm", "dsr1-fp8-h200-sglang"], Filters(seq_lens=["8k1k"]))


def test_json_matrix(jobs):
    rows = json.loads(to_json(jobs))
    assert len(rows) == len(jobs)
    r = rows[0]
    assert r["config-key"] == "dsv4-fp4-b200-vllm" and r["fingerprint"] == jobs[0].fingerprint
    assert r["launch"]["argv"][:2] == ["vllm", "serve"] and r["not-renderable"] is None
    assert r["job-format"] == 2 and r["benches"][0]["max_concurrency"] == r["conc"] == 1
    assert r["benches"][0] == {
        "base_url": "http://localhost:8000",
        "model": "deepseek-ai/DeepSeek-V4-Pro",
        # InferenceX's dsv4_fp4_b200_vllm.sh passes these to its client (the key's launch profile)
        "backend": "vllm",
        "trust_remote_code": True,
        "dataset_name": "random",
        "random_input_len": 8192,
        "random_output_len": 1024,
        "random_range_ratio": 0.8,
        "random_range_rule": "inferencex",
        "use_chat_template": False,
        "dsv4": False,
        "num_prompts": 10,
        "max_concurrency": 1,
        "num_warmups": 2,
        "ignore_eos": True,
        "percentile_metrics": ["ttft", "tpot", "itl", "e2el"],
        "metric_percentiles": [90.0, 99.0, 99.9],
        "save_result": True,
        "result_dir": "results",
        "result_filename": "dsv4-fp4-b200-vllm_dsv4_8k1k_tp8-ep1-dpa0-pp1-conc1.json",
    }
    # the `servelab bench` command of the point is rendered from it, never stored to be parsed back
    assert jobs[0].benches[0].argv()[:4] == ["servelab", "bench", "--base-url", "http://localhost:8000"]


def test_github_matrix(jobs):
    m = json.loads(to_github(jobs))
    assert list(m) == ["single-node-8k1k"] and len(m["single-node-8k1k"]["include"]) == len(jobs)
    include = m["single-node-8k1k"]["include"]
    assert {e["queue"] for e in include} == {"b200-dgxc", "h200-nb"}
    assert all(isinstance(v, (str, int, bool)) for e in include for v in e.values())
    # each row's `run` is `servelab run KEY --arm A --seq-len S --conc N`, which plans exactly that job
    first, job = include[0], jobs[0]
    argv = shlex.split(first["run"])
    assert argv == recipe_run_argv(job)
    args = dict(zip(argv[3::2], argv[4::2], strict=True))
    plan, _ = plan_from(argv[2], arm=args["--arm"], seq_len=args["--seq-len"], conc=int(args["--conc"]))
    assert plan.server.argv == job.launch.argv and plan.fingerprint == job.fingerprint


def test_github_matrix_over_the_limit_is_split(shipped):
    jobs = expand(shipped, [], Filters(seq_lens=["8k1k"])) * 20
    m = json.loads(to_github(jobs))
    assert all(len(part["include"]) <= 256 for part in m.values())
    assert list(m)[0] == "single-node-8k1k-1" and len(m) == -(-len(jobs) // 256)
    assert [e["fingerprint"] for part in m.values() for e in part["include"]] == [j.fingerprint for j in jobs]


def test_buildkite_pipeline(jobs):
    doc = yaml.safe_load(to_buildkite(jobs))
    steps = doc["steps"]
    assert len(steps) == len(jobs)
    assert len({s["key"] for s in steps}) == len(steps)
    first = steps[0]
    assert first["agents"] == {"queue": "b200-dgxc"}
    assert first["env"]["SERVELAB_FINGERPRINT"] == jobs[0].fingerprint
    assert first["command"].startswith("#!/usr/bin/env bash")
    assert first["command"].rstrip().endswith(shlex.join(run_argv(jobs[0])))
    assert _job_in(first["command"].replace("$$", "$")) == json.loads(json.dumps(jobs[0].to_json()))
    assert steps[-1]["agents"] == {"queue": "h200-nb"}


def _job_in(text: str) -> dict:
    """The job JSON a script writes in its here-document."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"cat > {JOB_FILE} <<"))
    end = lines[start].rsplit("'", 2)[1]
    return json.loads("\n".join(lines[start + 1 : lines.index(end, start + 1)]))


def test_scripts_carry_every_argument(store_dir, tmp_path):
    p = store_dir / "recipes" / "b200.yaml"
    p.write_text(
        p.read_text().replace(
            "    enable-prefix-caching: true\n",
            "    enable-prefix-caching: true\n"
            '    extra-args: ["--served-model-name", "a b\'c;$(rm -rf x)"]\n',
        )
    )
    job = expand(open_store(store_dir), ["dsv4f-fp8-b200-vllm"], Filters(mode="test-config", conc=[1]))[0]
    text = script(job)
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    assert _job_in(text)["launch"]["argv"] == job.launch.argv
    assert "a b'c;$(rm -rf x)" in job.launch.argv


def test_docker_launcher_pins_digest(shipped):
    job = expand(shipped, ["dsv4f-fp8-b200-vllm"], Filters(mode="test-config", conc=[1]))[0]
    text = script(job, "docker")
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    digest = "sha256:e1c1ff1af9a15921bfa11d1d95047258c1797392cdbfa296e7639da446b23f97"
    assert _job_in(text)["image-digest"] == digest
    assert text.rstrip().endswith(" --docker")


def test_sh_needs_out_for_several_jobs(jobs, tmp_path):
    with pytest.raises(ServelabError, match="need an output directory"):
        emit(jobs, "sh")
    listing = emit(jobs, "sh", tmp_path / "scripts")
    files = listing.split()
    assert len(files) == len(jobs) and all(os.access(f, os.X_OK) for f in files)


# Stands in for `vllm serve MODEL --port P ...`: servelab's mock OpenAI server on that port.
FAKE_VLLM = """\
#!{python}
import os, sys
if os.environ.get("FAKE_VLLM_EXIT"):
    print("CUDA error: no device", flush=True)
    sys.exit(1)
port = sys.argv[sys.argv.index("--port") + 1]
os.execv(sys.executable, [sys.executable, "-m", "servelab.bench.mock_server", "--port", port,
                          "--model", sys.argv[2], "--token-delay-ms", "0.2"])
"""
# the console script, guarded like pip's: the bench's spawned workers import it again as __mp_main__
SERVELAB = "#!{python}\nfrom servelab.cli.main import main\nif __name__ == '__main__':\n    main()\n"


def _run_job_script(store_dir, tmp_path, env_extra: dict) -> tuple[subprocess.CompletedProcess, Path]:
    port = free_port(18700, 18800)
    p = store_dir / "recipes" / "b200.yaml"
    client = f"  client: {{port: {port}, num-prompts: 2, warmups-per-conc: 0}}\n"
    p.write_text(p.read_text().replace("dsv4-fp4-b200-vllm:\n", "dsv4-fp4-b200-vllm:\n" + client))
    jobs = expand(open_store(store_dir), ["dsv4-fp4-b200-vllm"], Filters(mode="test-config", conc=[1]))
    job = next(j for j in jobs if j.row["ep"] == 1)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in (("vllm", FAKE_VLLM), ("servelab", SERVELAB)):
        f = bindir / name
        f.write_text(body.format(python=sys.executable))
        f.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": src, **env_extra}
    r = subprocess.run(
        ["bash", "-c", script(job)], cwd=work, env=env, capture_output=True, text=True, timeout=240
    )
    return r, work


@pytest.mark.slow  # 2.5 s of CPU a case: a pipeline script running servelab run
def test_script_runs_the_job_with_servelab_run(store_dir, tmp_path):
    r, work = _run_job_script(store_dir, tmp_path, {})
    assert r.returncode == 0, r.stderr
    with Store.open(work / "results" / "results.db") as store:
        [run] = store.list_runs()
        assert run.name == "dsv4-fp4-b200-vllm" and run.outcome == "pass"
        assert run.provenance.server_argv[:2] == ["vllm", "serve"]
        completed = [m.value for m in store.metrics(run.id) if m.stage == "bench" and m.name == "completed"]
        assert completed == [2.0]


@pytest.mark.slow  # 1.5 s of CPU a case: a pipeline script running servelab run
def test_script_fails_when_the_server_dies(store_dir, tmp_path):
    r, work = _run_job_script(store_dir, tmp_path, {"FAKE_VLLM_EXIT": "1"})
    assert r.returncode == 3
    assert "exited with 1 before it was healthy" in r.stderr and "CUDA error: no device" in r.stderr
