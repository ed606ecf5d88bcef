"""`servelab plan --save-dir`: the picks as a recipe that validates, a launch script and a Kubernetes manifest
that run the same argv, for the parallel split the plan chose."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from clirun import servelab
from typer.testing import CliRunner

from servelab.cli.main import app

QWEN = ["plan", "qwen3-32b", "--gpus", "4", "--isl", "2000", "--osl", "200", "--mode", "agg"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("picks")
    r = CliRunner().invoke(app, [*QWEN, "--json", "--save-dir", str(out), "--save-top", "2"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    return plan, {p["rank"]: Path(p["directory"]) for p in plan["saved"] if p["directory"]}


def parallel_flags(argv: list[str]) -> dict[str, str]:
    names = ("--tensor-parallel-size", "--data-parallel-size", "--pipeline-parallel-size")
    return {a: argv[i + 1] for i, a in enumerate(argv) if a in names}


def expected_flags(parallel: dict) -> dict[str, str]:
    if parallel["dp_attn"]:
        flags = {"--tensor-parallel-size": "1", "--data-parallel-size": str(parallel["tp"])}
    else:
        flags = {"--tensor-parallel-size": str(parallel["tp"])}
    if parallel["pp"] > 1:
        flags["--pipeline-parallel-size"] = str(parallel["pp"])
    return flags


def run_launch_script(script: Path, tmp_path: Path) -> list[str]:
    """Run launch.sh with a stand-in `vllm` that records the argv it was given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "vllm"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return ["vllm", *json.loads(r.stdout)]


def test_distinct_deployments_are_saved_best_first(saved):
    plan, dirs = saved
    assert 1 in dirs and len(dirs) == 2
    by_rank = {c["rank"]: c for c in plan["candidates"]}
    picked = [(by_rank[r]["parallel"]["label"], by_rank[r]["replicas"]) for r in dirs]
    assert len(set(picked)) == 2  # two deployments, not one at two loads
    for d in dirs.values():
        assert {p.name for p in d.iterdir()} >= {"recipe.yaml", "launch.sh", "k8s.yaml"}


def test_recipe_validates_and_carries_the_chosen_split(saved):
    plan, dirs = saved
    runner = CliRunner()
    for rank, d in dirs.items():
        cand = next(c for c in plan["candidates"] if c["rank"] == rank)
        r = runner.invoke(app, ["recipes", "validate", str(d / "recipe.yaml")])
        assert r.exit_code == 0 and r.stdout.startswith("ok "), r.output
        ((key, recipe),) = yaml.safe_load((d / "recipe.yaml").read_text()).items()
        arm = recipe["scenarios"]["fixed-seq-len"][0]["search-space"][0]
        assert arm["tp"] == cand["parallel"]["tp"] and arm.get("pp", 1) == cand["parallel"]["pp"]
        assert arm["conc-list"] == [cand["concurrency_per_replica"]]
        assert recipe["model"] == "Qwen/Qwen3-32B" and recipe["framework"] == "vllm"


def test_launch_script_and_manifest_run_the_same_argv_for_the_split(saved, tmp_path):
    plan, dirs = saved
    for rank, d in dirs.items():
        cand = next(c for c in plan["candidates"] if c["rank"] == rank)
        argv = run_launch_script(d / "launch.sh", tmp_path)
        assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3-32B"]
        assert parallel_flags(argv) == expected_flags(cand["parallel"])
        (exec_line,) = [x for x in (d / "launch.sh").read_text().splitlines() if x.startswith("exec ")]
        assert shlex.split(exec_line)[1:] == argv
        docs = list(yaml.safe_load_all((d / "k8s.yaml").read_text()))
        deployment = next(x for x in docs if x["kind"] == "Deployment")
        service = next(x for x in docs if x["kind"] == "Service")
        assert deployment["spec"]["replicas"] == cand["replicas"]
        pod = deployment["spec"]["template"]
        (container,) = pod["spec"]["containers"]
        assert [*container["command"], *container["args"]] == argv
        gpus = cand["parallel"]["tp"] * cand["parallel"]["pp"]
        assert container["resources"]["requests"]["nvidia.com/gpu"] == gpus
        assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
        assert (
            service["spec"]["selector"]
            == pod["metadata"]["labels"]
            == deployment["spec"]["selector"]["matchLabels"]
        )
        assert service["spec"]["ports"][0]["port"] == container["ports"][0]["containerPort"]


@pytest.mark.slow  # 2.9 s of CPU a case: a whole plan, or every command's help
def test_a_store_recipe_of_the_same_checkpoint_lends_its_engine_flags(tmp_path):
    args = ["plan", "sgl-project/DeepSeek-V4-Flash-FP8", "--mode", "agg", "--top", "1"]
    r = CliRunner().invoke(app, [*args, "--save-dir", str(tmp_path), "--save-top", "1"])
    assert r.exit_code == 0, r.output
    (pick,) = tmp_path.iterdir()
    (recipe,) = yaml.safe_load((pick / "recipe.yaml").read_text()).values()
    assert recipe["engine"]["tokenizer-mode"] == "deepseek_v4" and recipe["evals"]
    assert "--tokenizer-mode deepseek_v4" in (pick / "launch.sh").read_text()
    ok = CliRunner().invoke(app, ["recipes", "validate", str(pick / "recipe.yaml")])
    assert ok.exit_code == 0, ok.output


def test_save_dir_needs_an_engine_with_a_launch_command(tmp_path):
    r = CliRunner().invoke(app, [*QWEN, "--backend", "torch", "--save-dir", str(tmp_path)])
    assert "--save-dir: the torch backend has no launch command" in str(r.exception)


def test_a_save_dir_that_is_a_file_is_refused_before_the_search(tmp_path, monkeypatch):
    kept = tmp_path / "file.txt"
    kept.write_text("keep me")

    def no_search(req):
        raise AssertionError("the plan ran before --save-dir was checked")

    monkeypatch.setattr("servelab.cli.plan.make_plan", no_search)
    r = servelab(*QWEN, "--save-dir", str(kept))
    assert r.returncode == 2
    assert (
        r.stderr.strip()
        == f"error: --save-dir: {kept} is not a directory (give a directory, new or existing)"
    )
    assert kept.read_text() == "keep me"
