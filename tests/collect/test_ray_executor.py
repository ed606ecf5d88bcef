"""The Ray executor on a local CPU cluster with the fake ops: shards of single-GPU keys as tasks, collectives
on a placement group of one bundle per rank. Skipped, with the reason, where ray is not installed."""

import os
from pathlib import Path

import pytest
from fakeops import fake_suite

from servelab.collect.campaign import CampaignConfig, plan_campaign, run
from servelab.collect.campaign_dir import CampaignDir, key_from_row, key_id
from servelab.collect.executors import RayExecutor

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'servelab[ray]')")


@pytest.fixture(scope="module")
def cluster():
    # Ray's workers import the fake suite by its path (fakeops:bench) like the local executor's; this test's
    # folder is on the test process's path only, so it is handed to them.
    path = os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    yield
    ray.shutdown()


@pytest.mark.slow  # starts a local Ray cluster: 10-15 s
def test_ray_campaign_measures_every_key_once(tmp_path, cluster):
    cfg = CampaignConfig(out=tmp_path / "c", models=("llama-3.1-8b",), smoke=True, gpus=2)
    executor = RayExecutor(shard_size=3, gpu=False)
    report = run(cfg, executor=executor, suite=fake_suite(), progress=False, echo=lambda s: None)
    rows = CampaignDir(cfg.out).rows()
    ids = [key_id(key_from_row(r)) for r in rows]
    assert len(ids) == len(set(ids)) == len(plan_campaign(cfg).keys)
    assert report["ok"]
    pids = {r["pid"] for r in rows if "pid" in r}
    assert pids  # measured in Ray worker processes
    comm = [r for r in rows if r["op"] in ("allreduce", "p2p") and r["source"] == "measured"]
    assert comm and all(r["rank"] == 0 for r in comm)  # rank 0 of the placement group reports
    again = run(cfg, executor=executor, suite=fake_suite(), progress=False, echo=lambda s: None)
    assert again["this_run"]["rows"] == 0
