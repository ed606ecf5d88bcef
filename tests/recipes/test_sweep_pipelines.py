"""Output formats: JSON matrix, GitHub matrix, Buildkite pipeline, shell scripts (quoted, and really run)."""

import json
import os
import shlex
import socket
import subprocess
import sys

import pytest
import yaml

from servelab.errors import ServelabError
from servelab.recipes.filters import Filters
from servelab.recipes.pipelines import emit, script, to_buildkite, to_github, to_json
from servelab.recipes.store import open_store
from servelab.recipes.sweep import expand


@pytest.fixture
def jobs(shipped):
    return expand(shipped, ["dsv4-fp4-b200-vllm", "dsr1-fp8-h200-sglang"], Filters(seq_lens=["8k1k"]))


def test_json_matrix(jobs):
    rows = json.loads(to_json(jobs))
    assert len(rows) == len(jobs)
    r = rows[0]
    assert r["config-key"] == "dsv4-fp4-b200-vllm" and r["fingerprint"] == jobs[0].fingerprint
    assert r["launch"]["argv"][:2] == ["vllm", "serve"] and r["not-renderable"] is None
    assert r["benches"][0]["conc"] == r["conc"] and r["benches"][0]["client"][:2] == ["servelab", "bench"]
    assert r["benches"][0]["dataset"] == {
        "name": "random",
        "input-len": 8192,
        "output-len": 1024,
        "range-ratio": 0.8,
        "num-prompts": 10,
    }


def test_github_matrix(jobs):
    m = json.loads(to_github(jobs))
    assert list(m) == ["single-node-8k1k"] and len(m["single-node-8k1k"]["include"]) == len(jobs)
    include = m["single-node-8k1k"]["include"]
    assert {e["queue"] for e in include} == {"b200-dgxc", "h200-nb"}
    assert all(isinstance(v, (str, int, bool)) for e in include for v in e.values())


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
    assert (
        first["command"].startswith("#!/usr/bin/env bash")
        and shlex.join(jobs[0].launch.argv) in first["command"]
    )
    assert steps[-1]["agents"] == {"queue": "h200-nb"}


def test_scripts_quote_every_argument(store_dir, tmp_path):
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
    server_line = next(line for line in text.splitlines() if line.startswith("vllm serve"))
    assert shlex.split(server_line.removesuffix(" > server.log 2>&1 &")) == job.launch.argv
    assert "a b'c;$(rm -rf x)" in job.launch.argv


def test_docker_launcher_pins_digest(shipped):
    job = expand(shipped, ["dsv4f-fp8-b200-vllm"], Filters(mode="test-config", conc=[1]))[0]
    text = script(job, "docker")
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    assert (
        "vllm/vllm-openai:v0.25.0@sha256:e1c1ff1af9a15921bfa11d1d95047258c1797392cdbfa296e7639da446b23f97"
        in text
    )
    assert "docker rm -f servelab-" in text


def test_sh_needs_out_for_several_jobs(jobs, tmp_path):
    with pytest.raises(ServelabError, match="need an output directory"):
        emit(jobs, "sh")
    listing = emit(jobs, "sh", tmp_path / "scripts")
    files = listing.split()
    assert len(files) == len(jobs) and all(os.access(f, os.X_OK) for f in files)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FAKE_SERVER = """\
#!{python}
# Stands in for `vllm`: records its argv and env, serves /health after a short start-up, runs until killed.
import http.server, json, os, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
json.dump({{"argv": sys.argv[1:], "cuda_home": os.environ.get("CUDA_HOME")}}, open("server_args.json", "w"))
time.sleep(0.3)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""

FAKE_CLIENT = """\
#!{python}
# Stands in for `servelab bench`: records its argv and checks the server is up.
import json, sys, urllib.request
base = sys.argv[sys.argv.index("--base-url") + 1]
urllib.request.urlopen(base + "/health").read()
json.dump(sys.argv[1:], open("bench_args.json", "w"))
"""


@pytest.mark.skipif(
    subprocess.run(["which", "curl"], capture_output=True).returncode != 0,
    reason="the job script polls /health with curl, which is not installed here",
)
def test_script_runs_server_bench_and_teardown(store_dir, tmp_path):
    port = _free_port()
    p = store_dir / "recipes" / "b200.yaml"
    p.write_text(
        p.read_text().replace("dsv4-fp4-b200-vllm:\n", f"dsv4-fp4-b200-vllm:\n  client: {{port: {port}}}\n")
    )
    job = expand(open_store(store_dir), ["dsv4-fp4-b200-vllm"], Filters(mode="test-config", conc=[2]))[0]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in (("vllm", FAKE_SERVER), ("servelab", FAKE_CLIENT)):
        f = bindir / name
        f.write_text(body.format(python=sys.executable))
        f.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    text = script(job).replace("sleep 5", "sleep 0.2")  # keep the test fast; the poll logic is unchanged
    r = subprocess.run(["bash", "-c", text], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    server = json.loads((work / "server_args.json").read_text())
    assert ["vllm", *server["argv"]] == job.launch.argv
    assert server["cuda_home"] == "/usr/local/cuda"
    assert json.loads((work / "bench_args.json").read_text()) == job.benches[0].client[1:]
    # teardown: nothing listens on the port any more
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_script_fails_early_when_server_dies(shipped, tmp_path):
    job = expand(shipped, ["dsv4-fp4-b200-vllm"], Filters(mode="test-config", conc=[2]))[0]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "vllm").write_text("#!/bin/sh\necho 'CUDA error: no device' >&2\nexit 1\n")
    (bindir / "vllm").chmod(0o755)
    (bindir / "curl").write_text("#!/bin/sh\nexit 7\n")
    (bindir / "curl").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    text = script(job).replace("sleep 5", "sleep 0.1")
    r = subprocess.run(
        ["bash", "-c", text], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 1
    assert "server exited before becoming healthy" in r.stderr and "CUDA error: no device" in r.stderr
