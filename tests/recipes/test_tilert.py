"""InferenceX's TileRT disaggregated jobs (glm5.1-fp8-b200-tilert): what servelab deploys equals what
upstream's launcher, model script and tilert_utils scripts start on each node (the pinned capture,
tests/data/inferencex/launch/tilert-launches.json.gz)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from pinned import jobs_by_id, rendered

from servelab.recipes import tilert
from servelab.recipes.capture.tilert import NODE_IPS, capture_row
from servelab.recipes.engines.base import Role

ROOT = Path(__file__).resolve().parents[2]
IX = ROOT / "tests" / "data" / "inferencex"
CAPTURE = IX / "launch" / "tilert-launches.json.gz"


def records() -> list[dict]:
    return json.loads(gzip.decompress(CAPTURE.read_bytes()))


def _started(record: dict) -> list[tuple]:
    """(node, argv, env) of every server and router the capture's nodes start, at the capture's addresses
    (the weight conversion before the decode server is a setup step, not a process of the deployment)."""
    out = []
    for node in record["nodes"]:
        for c in node["commands"]:
            if tilert.SETUP not in c["argv"]:
                out.append((node["rank"], c["argv"], c["env"]))
    return sorted(out, key=repr)


def _rendered(deployment) -> list[tuple]:
    return rendered(deployment, NODE_IPS)


@pytest.fixture(scope="module")
def jobs() -> dict[str, object]:
    return jobs_by_id(tilert.is_tilert, tilert.job_id)


def test_every_tilert_job_deploys_what_upstreams_scripts_start_on_each_node(jobs):
    recs = records()
    assert len(recs) == 2 and set(jobs) == {r["id"] for r in recs}
    for record in recs:
        job = jobs[record["id"]]
        assert job.deployment is not None, (record["id"], job.not_renderable)
        assert _rendered(job.deployment) == _started(record), record["id"]


def test_decode_on_node_0_prefill_and_the_router_on_node_1(jobs):
    for job in jobs.values():
        d = job.deployment
        assert d.nodes == 2
        assert [(p.role, p.node, p.port) for p in d.processes] == [
            (Role.DECODE, 0, 5557),
            (Role.PREFILL, 1, 8000),
            (Role.ROUTER, 1, 8888),
        ]
        assert d.processes[d.endpoint].role == Role.ROUTER
        decode, prefill, router = d.processes
        # the prefill's connector pushes KV to the decode node's control port; the router reaches both
        connector = json.loads(prefill.argv[prefill.argv.index("--kv-transfer-config") + 1])
        assert connector["kv_connector_extra_config"]["tilert_host"] == "{{node:0}}"
        assert router.argv[router.argv.index("--decode") + 1] == "{{node:0}}:5556:5557"
        assert router.argv[router.argv.index("--vllm-url") + 1] == "http://{{node:1}}:8000"
        assert router.env["CUDA_VISIBLE_DEVICES"] == ""  # run_node.sh keeps the router off the GPUs
        # the servers' length is the job's
        assert prefill.argv[prefill.argv.index("--max-model-len") + 1] == str(job.row["max-model-len"])
        assert decode.health_path is None and prefill.gpus == decode.gpus == 8


def test_the_profiles_are_what_the_capture_gives():
    stored = json.loads(tilert.PROFILES_PATH.read_text())
    assert stored == json.loads(json.dumps(tilert.profiles_from(records()), sort_keys=True))
    # the weight conversion is kept as the decode node's setup
    for profile in stored.values():
        assert [(s["node"], s["argv"][2]) for s in profile["setup"]] == [(0, tilert.SETUP)]


def test_a_job_the_capture_lacks_is_refused_and_other_rows_are_not_tilert(jobs):
    job = next(iter(jobs.values()))
    deployment, why = tilert.deployment_for(job.key, {**job.row, "isl": 4096})
    assert deployment is None and "no capture" in why and "isl=4096" in why
    assert tilert.deployment_for(job.key, {**job.row, "framework": "sglang-disagg"}) == (None, None)


INFERENCEX = os.environ.get("SERVELAB_INFERENCEX")


@pytest.mark.skipif(
    not INFERENCEX or shutil.which("bash") is None,
    reason="re-running upstream's scripts needs an InferenceX checkout (SERVELAB_INFERENCEX) and bash",
)
def test_the_capture_is_what_upstreams_scripts_start_now():
    for record in records():
        got = capture_row(Path(str(INFERENCEX)), record["row"])
        assert (got["nodes"], got["bench"]) == (record["nodes"], record["bench"]), record["id"]
