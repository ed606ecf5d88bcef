"""InferenceX's llm-d disaggregated jobs (dsv4-fp4-gb200-llmd-vllm): what servelab deploys equals what
upstream's launcher, wrapper, submit.sh, job.slurm and server.sh start on each node (the pinned capture,
tests/data/inferencex/launch/llmd-launches.json.gz), with the files EPP and Envoy read."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from pinned import jobs_by_id, rendered

from servelab.recipes import llmd
from servelab.recipes.capture.llmd import NODE_IPS, capture_row
from servelab.recipes.engines.base import Role

ROOT = Path(__file__).resolve().parents[2]
IX = ROOT / "tests" / "data" / "inferencex"
CAPTURE = IX / "launch" / "llmd-launches.json.gz"


def records() -> list[dict]:
    return json.loads(gzip.decompress(CAPTURE.read_bytes()))


def _started(record: dict) -> list[tuple]:
    return sorted(
        ((n["rank"], c["argv"], c["env"]) for n in record["nodes"] for c in n["commands"]), key=repr
    )


def _rendered(deployment) -> list[tuple]:
    return rendered(deployment, NODE_IPS)


@pytest.fixture(scope="module")
def jobs() -> dict[str, object]:
    return jobs_by_id(llmd.is_llmd, llmd.job_id)


def test_every_llmd_job_deploys_what_upstreams_scripts_start_on_each_node(jobs):
    recs = records()
    assert len(recs) == 3 and set(jobs) == {r["id"] for r in recs}
    for record in recs:
        job = jobs[record["id"]]
        assert job.deployment is not None, (record["id"], job.not_renderable)
        assert _rendered(job.deployment) == _started(record), record["id"]
        # the files EPP and Envoy read, as the coordinator wrote them and job.slurm mounts them
        at = job.deployment.at_addresses(NODE_IPS[: job.deployment.nodes])
        assert {llmd.FILES[p]: text for p, text in record["files"].items()} == at.files, record["id"]


def test_prefill_nodes_first_then_decode_with_the_coordinator_on_the_first_decode_node(jobs):
    for job in jobs.values():
        d, settings = job.deployment, dict(s.split("=", 1) for s in job.row["prefill"]["additional-settings"])
        prefill_nodes = int(settings["PREFILL_NODES"])
        vllm = [(p.role, p.node) for p in d.processes if p.argv[0] == "vllm"]
        assert vllm == [(Role.PREFILL if n < prefill_nodes else Role.DECODE, n) for n in range(d.nodes)]
        coordinator = {p.argv[0]: p for p in d.processes if p.node == prefill_nodes}
        assert {"epp", "envoy", "pd-sidecar"} <= set(coordinator)
        router = d.processes[d.endpoint]
        assert router.argv[0] == "envoy" and router.port == 8080 and router.role == Role.ROUTER
        # EPP's endpoint list names every prefill node's vLLM and the decode sidecars, by node (YAML once
        # the nodes' addresses are in)
        at = d.at_addresses(NODE_IPS[: d.nodes])
        endpoints = yaml.safe_load(at.files["endpoints.yaml"])["endpoints"]
        prefill = [e["address"] for e in endpoints if e["labels"]["llm-d.ai/role"] == "prefill"]
        assert prefill == NODE_IPS[:prefill_nodes]
        assert {e["port"] for e in endpoints} == {"8200", "8000"}
        # EPP reads the endpoint list where server.sh wrote it
        epp = coordinator["epp"]
        assert "--config-file=/tmp/epp-config-from-recipe.yaml" in epp.argv
        epp_config = yaml.safe_load(d.files["epp-config-from-recipe.yaml"])
        assert epp_config["plugins"][0]["parameters"]["path"] == "/tmp/endpoints.yaml"


def test_a_headless_tp_follower_has_no_port_and_each_engine_its_leaders_address(jobs):
    low = next(j for j in jobs.values() if "low-latency" in llmd.job_id(j.key, j.row))
    follower = [p for p in low.deployment.processes if "--headless" in p.argv]
    assert [(p.node, p.port, p.health_path) for p in follower] == [(3, None, None)]
    assert follower[0].argv[follower[0].argv.index("--master-addr") + 1] == "{{node:2}}"
    high = next(j for j in jobs.values() if "PREFILL_WORKERS=3" in llmd.job_id(j.key, j.row))
    addr = [
        p.argv[p.argv.index("--data-parallel-address") + 1]
        for p in high.deployment.processes
        if p.role == Role.PREFILL
    ]
    assert addr == ["{{node:0}}"] * 2 + ["{{node:2}}"] * 2 + ["{{node:4}}"] * 2  # three engines of two nodes


def test_the_profiles_are_what_the_capture_gives():
    stored = json.loads(llmd.PROFILES_PATH.read_text())
    assert stored == json.loads(json.dumps(llmd.profiles_from(records()), sort_keys=True))


def test_a_job_the_capture_lacks_is_refused_and_other_rows_are_not_llmd(jobs):
    job = next(iter(jobs.values()))
    deployment, why = llmd.deployment_for(job.key, {**job.row, "isl": 1024})
    assert deployment is None and "no capture" in why and "isl=1024" in why
    assert llmd.deployment_for(job.key, {**job.row, "framework": "dynamo-vllm"}) == (None, None)


INFERENCEX = os.environ.get("SERVELAB_INFERENCEX")


@pytest.mark.skipif(
    not INFERENCEX or shutil.which("unshare") is None or os.geteuid() != 0,
    reason="re-running upstream's scripts needs an InferenceX checkout (SERVELAB_INFERENCEX), unshare, root",
)
def test_the_capture_is_what_upstreams_scripts_start_now():
    for record in records():
        got = capture_row(Path(str(INFERENCEX)), record["row"])
        assert (got["nodes"], got["files"], got["bench"]) == (
            record["nodes"],
            record["files"],
            record["bench"],
        ), record["id"]
