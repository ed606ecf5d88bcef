"""InferenceX's AMD multinode disaggregated jobs: what servelab deploys equals what upstream's amd_utils
scripts start on each node (the pinned capture, tests/data/inferencex/launch/amd-disagg-launches.json.gz)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from pinned import jobs_by_id, rendered

from servelab.recipes import amd_disagg
from servelab.recipes.capture.amd_disagg import NODE_IPS, capture_row
from servelab.recipes.engines.base import Role

ROOT = Path(__file__).resolve().parents[2]
IX = ROOT / "tests" / "data" / "inferencex"
CAPTURE = IX / "launch" / "amd-disagg-launches.json.gz"


def records() -> list[dict]:
    return json.loads(gzip.decompress(CAPTURE.read_bytes()))


def _started(record: dict) -> list[tuple]:
    """(node, argv, env) of every server and router the capture's nodes start, at the capture's addresses."""
    out = []
    for node in record["nodes"]:
        for c in node["commands"]:
            # what a deployment is made of: the servers and the router; the scripts' barriers, waits and
            # benchmark are not
            if amd_disagg._server_role(c["argv"]) or amd_disagg._is_router(c["argv"]):
                env = dict(sorted({**c["exported"], **c["env"]}.items()))
                out.append((node["rank"], c["argv"], env))
    return sorted(out, key=repr)


def _rendered(deployment) -> list[tuple]:
    return rendered(deployment, NODE_IPS)


@pytest.fixture(scope="module")
def jobs() -> dict[str, object]:
    return jobs_by_id(amd_disagg.is_amd_disagg, amd_disagg.job_id)


def test_every_amd_disagg_job_deploys_what_upstreams_scripts_start_on_each_node(jobs):
    recs = records()
    assert len(recs) == 36 + 12 and set(jobs) == {r["id"] for r in recs}
    assert {r["row"]["framework"] for r in recs} == {"sglang-disagg", "atom-disagg"}
    assert sum(r["row"].get("scenario-type") == "agentic-coding" for r in recs) == 12
    for record in recs:
        job = jobs[record["id"]]
        assert job.deployment is not None, (record["id"], job.not_renderable)
        assert _rendered(job.deployment) == _started(record), record["id"]


def test_roles_nodes_and_the_router_as_endpoint(jobs):
    for job in jobs.values():
        d = job.deployment
        xp, yd = job.row["prefill"]["num-worker"], job.row["decode"]["num-worker"]
        assert d.nodes == xp + yd
        roles = [(p.role, p.node) for p in d.processes]
        want = [(Role.PREFILL, i) for i in range(xp)] + [(Role.DECODE, xp + i) for i in range(yd)]
        assert roles == [*want, (Role.ROUTER, 0)]
        router = d.processes[d.endpoint]
        assert router.role == Role.ROUTER and router.port == amd_disagg.ROUTER_PORT
        port = d.processes[xp + yd - 1].port
        assert f"http://{{{{node:{xp + yd - 1}}}}}:{port}" in router.argv


def test_the_profiles_are_what_the_capture_gives():
    stored = json.loads(amd_disagg.PROFILES_PATH.read_text())
    assert stored == json.loads(json.dumps(amd_disagg.profiles_from(records()), sort_keys=True))


def test_a_layout_the_capture_lacks_is_refused_with_its_dimensions(jobs):
    job = next(iter(jobs.values()))
    row = {**job.row, "decode": {**job.row["decode"], "tp": 2}}
    deployment, why = amd_disagg.deployment_for(job.key, row)
    assert deployment is None and "no captured decode server" in why and "'tp': '2'" in why


def test_other_rows_are_not_amd_disagg_jobs(jobs):
    row = next(iter(jobs.values())).row
    assert amd_disagg.deployment_for("k", {**row, "runner": "b200-dgxc"}) == (None, None)
    assert amd_disagg.deployment_for("k", {**row, "runner": "cluster:b200-nv"}) == (None, None)
    assert amd_disagg.deployment_for("k", {**row, "framework": "dynamo-sglang"}) == (None, None)


def _agentic(jobs) -> list:
    return [j for j in jobs.values() if j.scenario == "agentic-coding"]


def test_agentic_jobs_carry_their_recipe_scripts_hicache_settings(jobs):
    """The agentic recipe script's HiCache settings reach the servers through job.slurm's config file (env.sh
    sources it): the prefill offloads KV to CPU DRAM at the recipe's ratio and page size, the decode mirrors
    the page size; the router routes by consistent hashing, and the decode simulates DSV4's golden MTP
    acceptance (upstream's agentic fairness rule)."""
    agentic = _agentic(jobs)
    assert len(agentic) == 12
    for job in agentic:
        d = job.deployment
        prefill = next(p for p in d.processes if p.role == Role.PREFILL)
        decode = next(p for p in d.processes if p.role == Role.DECODE)
        router = d.processes[d.endpoint]
        hicache = prefill.argv[prefill.argv.index("--enable-hierarchical-cache") :]
        assert hicache[1:3] == ["--hicache-ratio", "3"] and "--enable-hierarchical-cache" not in decode.argv
        assert prefill.argv[-2 - len(hicache) :][:2] == ["--page-size", "256"] == decode.argv[-2:]
        assert prefill.env["HICACHE_PAGE_SIZE"] == "256" and prefill.env["FORCE_HICACHE_RATIO"] == "1"
        assert "--disable-radix-cache" not in prefill.argv + decode.argv  # HiCache needs the radix cache
        assert "--enable-metrics" in prefill.argv and "--enable-metrics" in decode.argv
        assert router.argv[router.argv.index("--policy") + 1] == "consistent_hashing"
        assert decode.env["SGLANG_SIMULATE_ACC_LEN"] == "2.49"  # MTP 3's golden acceptance length


def test_each_agentic_concurrency_replays_the_trace_against_the_router(jobs):
    for job in _agentic(jobs):
        assert [b.max_concurrency for b in job.benches] == job.point.concs
        assert all(b.dataset_name == "trace" and b.max_seconds == job.point.duration for b in job.benches)


INFERENCEX = os.environ.get("SERVELAB_INFERENCEX")


@pytest.mark.skipif(
    not INFERENCEX or shutil.which("bash") is None,
    reason="re-running upstream's scripts needs an InferenceX checkout (SERVELAB_INFERENCEX) and bash",
)
def test_the_capture_is_what_upstreams_scripts_print_now():
    benchmarks = Path(str(INFERENCEX)) / "benchmarks"
    sample = {r["key"]: r for r in records()}  # one job per key (the agentic key's through its recipe script)
    for record in sample.values():
        assert capture_row(benchmarks, record["row"]) == record["nodes"], record["id"]
