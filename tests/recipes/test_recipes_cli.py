"""The commands as users run them, through the console script's `main()` (in the test's process,
tests/clirun.py): output and exit codes."""

import json
import shlex

import pytest
import yaml
from clirun import servelab as run
from test_recipe_formats import EXAMPLE_MASTER, WORKLOAD


def test_list_and_show():
    r = run("recipes", "list")
    assert r.returncode == 0 and "dsv4f-fp8-b200-vllm" in r.stdout and "cluster:h200-nb" in r.stdout
    r = run("recipes", "show", "dsv4f-fp8-b200-vllm", "--as", "inferencex")
    entry = yaml.safe_load(r.stdout)["dsv4f-fp8-b200-vllm"]
    assert "engine" not in entry and entry["runner"] == "cluster:b200-nb"
    r = run("recipes", "show", "dsv4f-fp8-b200-vlm")
    assert r.returncode == 2 and r.stderr.startswith("error: config key") and "did you mean" in r.stderr


def test_list_and_validate_as_json():
    r = run("recipes", "list", "--json")
    assert r.returncode == 0, r.stderr
    listed = {row["key"]: row for row in json.loads(r.stdout)["recipes"]}
    assert (
        listed["dsv4f-fp8-b200-vllm"]["runner"] == "cluster:b200-nb"
        and listed["dsv4f-fp8-b200-vllm"]["jobs"] > 0
    )
    r = run("recipes", "validate", "--json")
    assert r.returncode == 0, r.stderr
    reports = json.loads(r.stdout)["recipes"]
    assert {rep["key"] for rep in reports} == set(listed) and all(rep["ok"] for rep in reports)
    r = run("recipes", "lock", "--check", "--json")
    assert r.returncode == 0
    stamp = {"schema": "servelab.recipes.lock", "schema_version": 1}
    assert json.loads(r.stdout) == stamp | {"up_to_date": True, "keys": len(listed), "stale": []}


def test_render_prints_exact_argv_and_env():
    r = run("recipes", "render", "dsv4-fp4-b200-vllm", "--tp", "8", "--ep", "8", "--dp-attn")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "export CUDA_HOME=/usr/local/cuda"
    argv = shlex.split(lines[-1])
    assert argv[argv.index("--tensor-parallel-size") :][:5] == [
        "--tensor-parallel-size",
        "1",
        "--data-parallel-size",
        "8",
        "--enable-expert-parallel",
    ]
    r = run("recipes", "render", "dsv4f-fp8-b200-vllm", "--tp", "8")
    assert r.returncode == 2 and "needs expert parallelism" in r.stderr


def test_render_takes_the_jobs_concurrency():
    # Upstream's dsv4_fp4_b200_vllm.sh: --max-num-batched-tokens 8192 up to concurrency 128, 2048 above.
    def batched_tokens(conc):
        r = run("recipes", "render", "dsv4-fp4-b200-vllm", "--tp", "8", "--conc", conc, "--json")
        assert r.returncode == 0, r.stderr
        argv = json.loads(r.stdout)["argv"]
        return argv[argv.index("--max-num-batched-tokens") + 1]

    assert batched_tokens("64") == "8192" and batched_tokens("512") == "2048"
    r = run("recipes", "render", "dsv4-fp4-b200-vllm", "--conc", "0")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--conc: expected a concurrency" in r.stderr


def test_validate_file_formats(tmp_path):
    (tmp_path / "master.yaml").write_text(EXAMPLE_MASTER)
    r = run("recipes", "validate", str(tmp_path / "master.yaml"), "-v")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok   dsv4-fp4-b200-vllm" in r.stdout and "fits" in r.stdout
    (tmp_path / "w.yaml").write_text(WORKLOAD)
    r = run("recipes", "validate", str(tmp_path / "w.yaml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "perf-eval workload" in r.stdout
    r = run("recipes", "import", str(tmp_path / "w.yaml"), "--image", "vllm/vllm-openai:v0.25.0")
    imported = yaml.safe_load(r.stdout)["deepseek_v4_pro-b200"]
    assert (
        imported["engine"]["cuda-home"] == "/usr/local/cuda"
        and imported["image"] == "vllm/vllm-openai:v0.25.0"
    )
    r = run("recipes", "import", str(tmp_path / "w.yaml"), "--image", "vllm/vllm-openai:v0.25.0", "--json")
    assert json.loads(r.stdout)["recipes"]["deepseek_v4_pro-b200"] == imported
    bad = EXAMPLE_MASTER.replace("precision: fp4", "precision: fp4\n  tp: 8")
    (tmp_path / "bad.yaml").write_text(bad)
    r = run("recipes", "validate", str(tmp_path / "bad.yaml"))
    assert r.returncode == 2 and "tp: Extra inputs are not permitted" in r.stderr


def test_validate_h200_fp4_is_refused(tmp_path):
    (tmp_path / "h.yaml").write_text(EXAMPLE_MASTER.replace("cluster:b200-dgxc", "cluster:h200-nb"))
    r = run("recipes", "validate", str(tmp_path / "h.yaml"))
    assert r.returncode == 2
    assert "FAIL dsv4-fp4-b200-vllm" in r.stdout and "sgl-project/DeepSeek-V4-Pro-FP8" in r.stdout


def test_sweep_formats(tmp_path):
    r = run("sweep", "dsv4*", "--seq-lens", "8k1k", "--max-conc", "64", "--format", "json")
    rows = json.loads(r.stdout)
    assert rows and all(row["conc"] <= 64 for row in rows)
    r = run("sweep", "dsv4f-fp8-b200-vllm", "--format", "buildkite")
    assert len(yaml.safe_load(r.stdout)["steps"]) == 10
    r = run("sweep", "llama70b-*", "--precision", "fp8,fp4", "--format", "github")
    assert sum(len(m["include"]) for m in json.loads(r.stdout).values()) == 36
    r = run("sweep", "dsv4f-fp8-b200-vllm", "--format", "sh", "--out", str(tmp_path / "s"))
    assert len(r.stdout.split()) == 10
    r = run("sweep", "--mode", "test-config")
    assert r.returncode == 2 and "needs config keys" in r.stderr
    # filters that leave no row are an answer, as InferenceX's generator prints []
    r = run("sweep", "--model-prefix", "nothing")
    assert r.returncode == 0 and json.loads(r.stdout) == [] and "no jobs match" in r.stderr
    r = run("sweep", "--model-prefix", "nothing", "--format", "sh")  # but there is no script to write
    assert r.returncode == 2 and "no jobs match" in r.stderr
    r = run("sweep", "nothing*")  # a key or glob that matches nothing is a typo, as upstream refuses it
    assert r.returncode == 2 and "'nothing*' matches nothing" in r.stderr


@pytest.mark.slow  # 1.3 s of CPU a case: a git repository and the CLI
def test_changelog_commands(repo):
    base = repo.commit("base")
    p = repo.data / "recipes" / "b200.yaml"
    p.write_text(p.read_text().replace("max-num-seqs: 256", "max-num-seqs: 512"))
    repo.relock()
    repo.commit("no entry")
    r = run("changelog", "validate", "--base-ref", base, "--head-ref", "HEAD", "--dir", "data", cwd=repo.root)
    assert r.returncode == 2
    assert (
        "changelog: dsv4f-fp8-b200-vllm: fingerprint changed but no new perf-changelog.yaml entry" in r.stderr
    )
    assert "error: changelog validation failed: 1 problem(s)" in r.stderr
    repo.append(
        '\n- config-keys:\n    - dsv4f-fp8-b200-vllm\n  description:\n    - "More seqs"\n  pr-link: XXX\n'
    )
    repo.commit("entry")
    r = run("changelog", "validate", "--base-ref", base, "--dir", "data", cwd=repo.root)
    assert r.returncode == 0 and "ok: 1 new entry" in r.stdout
    r = run("changelog", "validate", "--base-ref", base, "--dir", "data", "--json", cwd=repo.root)
    assert r.returncode == 0 and json.loads(r.stdout) == {
        "schema": "servelab.changelog.validate",
        "schema_version": 1,
        "ok": True,
        "rules": "gate",
        "new_entries": 1,
        "notes": [],
    }
    r = run("changelog", "jobs", "--base-ref", base, "--dir", "data", "--format", "json", cwd=repo.root)
    assert r.returncode == 0, r.stderr
    assert {row["config-key"] for row in json.loads(r.stdout)} == {"dsv4f-fp8-b200-vllm"}
