"""`servelab run` checks the server launch against the flags its image's engine release accepts before any
server starts (servelab.engines.releases): a misspelt flag is one line and exit 2, not a failed start-up."""

import json

import pytest
import yaml
from clirun import servelab
from typer.testing import CliRunner

from servelab.cli.main import app
from servelab.errors import ServelabError
from servelab.results.store import Store
from servelab.run.launch_check import check_server
from servelab.run.plan import ServerPlan
from servelab.runner.deployment import DeployedProcess

runner = CliRunner()


def _workload(tmp_path, serve_args: str, image: str | None = "vllm/vllm-openai:v0.25.0"):
    vllm = {"model": "mock-model", "serve_args": serve_args} | ({"image": image} if image else {})
    data = {
        "name": "tiny",
        "gpu": "H200",
        "vllm": vllm,
        "vllm_bench": {
            "configs": [
                {"name": "s", "input_len": 16, "output_len": 4, "num_prompts": 4, "max_concurrency": 1}
            ]
        },
    }
    path = tmp_path / "wl.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _servelab(*args, cwd):
    return servelab(*args, cwd=cwd)  # in-process (tests/clirun.py)


def test_dry_run_of_a_misspelt_serve_args_flag_exits_2_in_one_line(tmp_path):
    wl = _workload(tmp_path, "--max-num-seqs 64 --gpu-memory-utilisation 0.9")
    r = _servelab("run", wl, "--dry-run", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.splitlines()
    assert line.startswith("error: the server launch would not start: --gpu-memory-utilisation: unknown flag")
    assert "vllm 0.25.0" in line and "did you mean --gpu-memory-utilization" in line


def test_a_refused_launch_starts_no_server_and_records_no_run(tmp_path, fake_vllm):
    wl = _workload(tmp_path, "--kv-cache-dtype fp9")
    r = _servelab("run", wl, "--store", tmp_path / "r.db", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "--kv-cache-dtype fp9: not a choice of vllm 0.25.0" in r.stderr
    assert not fake_vllm.exists()  # the stand-in vllm writes its pid file the moment it starts
    with Store.open(tmp_path / "r.db") as store:
        assert store.list_runs() == []


def test_dry_run_shows_the_release_the_launch_was_checked_against(tmp_path):
    wl = _workload(tmp_path, "--max-num-seqs 64")
    res = runner.invoke(app, ["run", str(wl), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["launch_check"] == {"release": "vllm 0.25.0", "note": None, "warnings": []}
    text = runner.invoke(app, ["run", str(wl), "--dry-run"])
    assert "  flags accepted by vllm 0.25.0\n" in text.stdout


def test_a_build_no_release_names_is_checked_with_warnings_only(tmp_path):
    wl = _workload(tmp_path, "--some-new-flag 1", image="vllm/vllm-openai:nightly-0123abc")
    res = runner.invoke(app, ["run", str(wl), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    check = json.loads(res.stdout)["launch_check"]
    assert "names no release" in check["note"]
    assert check["warnings"][0].startswith("--some-new-flag: unknown flag for vllm ")


def test_an_attached_server_is_not_checked(tmp_path):
    wl = _workload(tmp_path, "--gpu-memory-utilisation 0.9")
    res = runner.invoke(app, ["run", str(wl), "--dry-run", "--json", "--base-url", "http://127.0.0.1:9"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["launch_check"] is None


def test_a_command_of_no_known_engine_is_not_checked():
    assert check_server(ServerPlan(["my-server", "--bogus"], {}, 8000, "m", image="me/server:1")) is None


def test_every_engine_process_of_a_deployment_is_checked_the_router_is_not():
    good = ["vllm", "serve", "m", "--port", "8001"]
    bad = ["vllm", "serve", "m", "--port", "8002", "--gpu-memory-utilisation", "0.9"]
    router = ["vllm-router", "--port", "8000", "--worker-urls", "http://127.0.0.1:8001"]
    procs = (
        DeployedProcess("worker", 0, good, port=8001),
        DeployedProcess("worker", 1, bad, port=8002),
        DeployedProcess("router", 0, router, port=8000),
    )
    plan = ServerPlan(router, {}, 8000, "m", image="vllm/vllm-openai:v0.25.0", processes=procs)
    with pytest.raises(
        ServelabError, match="^worker 1 of the deployment would not start: --gpu-memory-utilisation"
    ):
        check_server(plan)
    fine = ServerPlan(router, {}, 8000, "m", image="vllm/vllm-openai:v0.25.0", processes=procs[::2])
    check = check_server(fine)
    assert check is not None and check.release and "0.25.0" in check.release
