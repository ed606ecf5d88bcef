"""Kubernetes manifests of a job's deployment (servelab.recipes.k8s, `servelab sweep --format k8s`).

Every manifest written for the pinned sweep is validated: the LeaderWorkerSets against the CRD schema pinned
from kubernetes-sigs/lws (tests/data/lws), every other object, and each LeaderWorkerSet's pod templates,
against Kubernetes' own schemas (kubernetes-validate, strict: an unknown field is an error).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import schema_contents
from pinned import pinned_jobs
from referencing import Registry, Resource

from servelab.errors import ServelabError
from servelab.recipes.emit import emit
from servelab.recipes.engines.base import Deployment, NodeProcess, Role
from servelab.recipes.k8s import Refused, base_name, k8s_manifests, manifest
from servelab.recipes.slurm import MPI_LAUNCHER

ROOT = Path(__file__).resolve().parents[2]
IX = ROOT / "tests" / "data" / "inferencex" / "configs"
CRD = ROOT / "tests" / "data" / "lws" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
K8S_VERSION = "1.33.0"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's where PyYAML has it: 317 files
REFUSALS = (  # why a deployment of the pinned sweep gets no manifest, each precise
    re.escape(
        "its TensorRT-LLM workers start as MPI ranks, a task per GPU under srun --mpi=pmix "
        "(trtllm-llmapi-launch), and the deployment names one process per node: a pod would start one rank"
    ),
    r"its prefill workers run in vLLM's data-parallel mode, \d+ processes on node \d+ \(one per rank\) "
    r"sharing its address: they would be containers of one pod, not written yet",
    r"\S+-decode worker 0 node 2: argv '8' after --data-parallel-start-rank \(the template's: '4'\) differs "
    r"from the pool's template",
    # AMD's agentic jobs: the decode inherits the Mooncake master's address on node 0 (env.sh's defaults,
    # though their HiCache tier starts no master), which no Service gives a pod on another node
    r"\{\{node:0\}\}:58137 in dsv4-fp4-mi355x-sglang-disagg-a-[0-9a-f]{8}-decode worker 0 node 0's env "
    r"MC_MASTER_ADDR: node 0's address is neither a Service nor this worker's own pod",
    # TileRT's prefill connector names the decode node's address and its control port apart (JSON fields,
    # tilert.py), and the decode server's Service is its HTTP port's: node 0's address maps to nothing
    r"\{\{node:0\}\} in \S+-tilert-\S+-prefill worker 0 node 0's argv: node 0's address is neither a Service "
    r"nor this worker's own pod",
    # llm-d's decode nodes run vLLM and its pd-sidecar side by side (llmd.py): two containers of one pod,
    # which the writer does not make
    r"a decode worker's processes are not one per node of \d+ nodes",
)


def every_job() -> tuple:
    return pinned_jobs()


def deployed() -> list:
    return [j for j in every_job() if j.deployment is not None]


def mapped() -> list:
    """The jobs whose deployment maps (no TensorRT-LLM MPI workers)."""
    return [j for j in deployed() if not any(MPI_LAUNCHER in p.argv for p in j.deployment.processes)]


@cache
def lws_validator() -> jsonschema.protocols.Validator:
    # libyaml's reader where PyYAML has it: the same data from this 1.3 MB file, in a fifteenth of the CPU
    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = version["schema"]["openAPIV3Schema"]
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


@cache
def core_validator(kind: str, api_version: str) -> jsonschema.protocols.Validator:
    """kubernetes-validate's strict schema of a kind, compiled once (its `validate` reads the schema files on
    every call, 0.1 s an object)."""
    folder = f"kubernetes-json-schema/v{K8S_VERSION}-local-strict"
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = schema_contents(f"{folder}/{kind.lower()}-{api}.json", K8S_VERSION)
    definitions = schema_contents(f"{folder}/_definitions.json", K8S_VERSION)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate(doc: dict) -> None:
    if doc["kind"] == "LeaderWorkerSet":
        assert doc["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
        lws_validator().validate(doc)
        for template in doc["spec"]["leaderWorkerTemplate"].values():
            if isinstance(template, dict):  # the pod templates, against the core schema too
                pod = {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {"name": "t"},
                    "template": template,
                }
                core_validator("PodTemplate", "v1").validate(pod)
        return
    core_validator(doc["kind"], doc["apiVersion"]).validate(doc)


def test_the_compiled_schemas_are_kubernetes_validates():
    """The cached validators answer as kubernetes-validate's own `validate` does."""
    docs = manifest(_multinode())
    for doc in docs:
        if doc["kind"] != "LeaderWorkerSet":
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            validate(doc)


@pytest.mark.slow  # 4.9 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_the_validators_catch_what_they_should():
    """The checks below would fail on a bad manifest: a misspelt field, a wrong type, a LWS without size
    semantics."""
    job = _multinode()
    docs = manifest(job)
    lws = next(d for d in docs if d["kind"] == "LeaderWorkerSet")
    bad = {**lws, "spec": {**lws["spec"], "replicas": "two"}}
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)
    dep = next(d for d in docs if d["kind"] == "Deployment")
    typo = {**dep, "spec": {**dep["spec"], "replica": 1}}
    with pytest.raises(jsonschema.ValidationError):
        validate(typo)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, K8S_VERSION, strict=True)


def written_manifests() -> list[tuple]:
    """(job, its manifest) for each deployed job of the pinned sweep that maps, after asserting that the
    others are refused for a reason REFUSALS explains."""
    written, refused = [], []
    for job in deployed():
        try:
            written.append((job, manifest(job)))
        except Refused as e:
            refused.append(str(e))
    # 317 of 542 today (36 of them AMD jobs, amd_disagg.py); 174 TensorRT-LLM ones are refused (as --format
    # slurm refuses them), 39 of vLLM's data-parallel mode, AMD's 12 agentic ones (MC_MASTER_ADDR)
    assert len(written) >= 310
    unexplained = [r for r in refused if not any(re.fullmatch(p, r) for p in REFUSALS)]
    assert refused and not unexplained, unexplained[:3]
    return written


def shape(job) -> tuple:
    """What makes two deployments' manifests differ in kind: the framework, each role and whether it spans
    several nodes, the files the deployment writes."""
    roles = {(p.role, any(q.node != p.node for q in job.deployment.processes if q.role == p.role))
             for p in job.deployment.processes}  # fmt: skip
    return job.row["framework"], tuple(sorted(roles, key=str)), tuple(sorted(job.deployment.files))


def assert_valid(job, docs: list[dict]) -> None:
    """The manifest survives its YAML text (as `--format k8s` writes it), every object validates, and every
    deployment is reached: a frontend Service, a Service for each Deployment."""
    text = yaml.safe_dump_all(docs, sort_keys=False)
    assert list(yaml.load_all(text, Loader=LOADER)) == docs
    for doc in docs:
        validate(doc)
    kinds = [d["kind"] for d in docs]
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert "LeaderWorkerSet" in kinds and ("Service", f"{base_name(job)}-frontend") in names
    assert all(("Service", name) in names for kind, name in names if kind == "Deployment")


@pytest.mark.slow  # 3.5 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_every_shape_of_deployment_in_the_pinned_sweep_validates():
    """The quick tier's share of the test below: every deployment is written or refused for a known reason,
    and one of each shape (26 of the 317 today) is validated."""
    firsts = {shape(job): (job, docs) for job, docs in reversed(written_manifests())}
    assert len(firsts) >= 20
    for job, docs in firsts.values():
        assert_valid(job, docs)


@pytest.mark.slow  # 2,836 objects of 317 manifests through PyYAML and the schemas: 10-12 s here
def test_every_manifest_of_the_pinned_sweep_validates():
    for job, docs in written_manifests():
        assert_valid(job, docs)


def _multinode():
    """A disaggregated job whose prefill and decode workers each span several nodes, behind nginx and
    several frontends."""
    return next(
        j
        for j in deployed()
        if all(
            any("--nnodes" in p.argv for p in j.deployment.processes if p.role == role)
            for role in (Role.PREFILL, Role.DECODE)
        )
        and "nginx.conf" in j.deployment.files
    )


def _mapped(text: str, names: dict[tuple[int, int], str], leader: int, own: int) -> str:
    """What the test expects of a placeholder: a Service where a side or router process serves that port on
    that node, the leader's address for the worker's first node, the pod's IP for its own node."""
    for (node, port), service in names.items():
        text = text.replace(f"{{{{node:{node}}}}}:{port}", f"{service}:{port}")
    text = text.replace(f"{{{{node:{leader}}}}}", "$(LWS_LEADER_ADDRESS)")
    return text.replace(f"{{{{node:{own}}}}}", "$(SERVELAB_POD_IP)")


def test_a_real_deployment_field_by_field():
    job = _multinode()
    dep = job.deployment
    docs = manifest(job)
    base = base_name(job)
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    services = {
        (0, 4222): f"{base}-nats-server",
        (0, 2379): f"{base}-etcd",
    }
    fronts = [p for p in dep.processes if p.role == Role.ROUTER and p.port == 8180]
    services |= {(p.node, 8180): f"{base}-frontend-8180" for p in fronts}
    for role, row in ((Role.PREFILL, job.point.prefill), (Role.DECODE, job.point.decode)):
        procs = [p for p in dep.processes if p.role == role]
        size = len(procs) // row.num_worker
        lws = by_name["LeaderWorkerSet", f"{base}-{role}"]
        assert lws["spec"]["replicas"] == row.num_worker
        spec = lws["spec"]["leaderWorkerTemplate"]
        assert spec["size"] == size
        leader = procs[0]
        templates = [spec.get("leaderTemplate", spec["workerTemplate"]), spec["workerTemplate"]]
        for rank in range(min(size, 2)):
            p = procs[rank]
            (c,) = templates[rank]["spec"]["containers"]
            want = [_mapped(t, services, leader.node, p.node) for t in p.argv]
            at = want.index("--node-rank") + 1  # the pod's index in its group, the leader's 0
            assert want[at] == str(rank)
            want[at] = "$(LWS_WORKER_INDEX)"
            assert c["command"] + c["args"] == want
            env = {e["name"]: e.get("value") for e in c["env"]}
            expected = {k: _mapped(v, services, leader.node, p.node) for k, v in p.env.items()}
            expected["HEAD_NODE_IP"] = f"{base}-frontend"
            expected.pop("CUDA_VISIBLE_DEVICES", None)  # the pod's GPUs are its own, numbered from 0
            if rank:
                expected = {"SERVELAB_POD_IP": None, **expected}
            assert env == expected
            assert c["resources"]["limits"]["nvidia.com/gpu"] == p.gpus
            assert c["image"] == job.row["image"]
        assert size == 1 or "$(LWS_LEADER_ADDRESS):29500" in templates[1]["spec"]["containers"][0]["args"]
    # the endpoint: nginx on 8000 behind a Service, the frontends as replicas of one Deployment
    endpoint = dep.processes[dep.endpoint]
    svc = by_name["Service", f"{base}-frontend"]
    assert svc["spec"]["ports"] == [{"name": "main", "port": endpoint.port, "targetPort": "main"}]
    front = by_name["Deployment", f"{base}-frontend"]
    assert svc["spec"]["selector"] == front["spec"]["template"]["metadata"]["labels"]
    (c,) = front["spec"]["template"]["spec"]["containers"]
    assert c["command"] + c["args"] == endpoint.argv
    assert c["ports"] == [{"name": "main", "containerPort": 8000}]
    assert by_name["Deployment", f"{base}-frontend-8180"]["spec"]["replicas"] == len(fronts)
    conf = by_name["ConfigMap", f"{base}-files"]["data"]["nginx.conf"]
    assert "{{node" not in conf and f"server {base}-frontend-8180:8180;" in conf
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/logs/nginx.conf"]["subPath"] == "nginx.conf" and mounts["/logs"]["name"] == "logs"


def _with(job, processes: list[NodeProcess], files: dict[str, str] | None = None):
    dep = Deployment(nodes=2, processes=processes, endpoint=len(processes) - 1, files=files or {})
    return job.model_copy(update={"deployment": dep})


HOSTILE = "it's \"quoted\"\nnew line: {x: [1]} # not a comment\n--- $(HOME) $$ ${PATH} \\ \t'"


@pytest.mark.slow  # 5.8 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_hostile_values_cannot_break_the_yaml_or_be_expanded():
    job = _multinode()
    procs = [
        NodeProcess(role=Role.SIDE, node=0, argv=["etcd", HOSTILE], port=2379, env={"V": HOSTILE}),
        NodeProcess(role=Role.WORKER, node=1, argv=["serve", "--x", HOSTILE], env={"A_B": HOSTILE}, gpus=2),
        NodeProcess(
            role=Role.ROUTER, node=0, argv=["front", f"--etcd=http://{{{{node:0}}}}:2379/{HOSTILE}"], port=80
        ),
    ]
    docs = manifest(_with(job, procs, {"a.yaml": HOSTILE + "{{node:0}}:2379"}))
    back = list(yaml.safe_load_all(yaml.safe_dump_all(docs)))
    assert back == docs and len(back) == len(docs)
    for doc in docs:
        validate(doc)
    escaped = HOSTILE.replace("$", "$$")  # kubelet reads `$$` as `$`, so nothing is expanded
    etcd = next(d for d in back if d["metadata"]["name"].endswith("-etcd") and d["kind"] == "Deployment")
    (c,) = etcd["spec"]["template"]["spec"]["containers"]
    assert c["args"] == [escaped] and c["env"] == [{"name": "V", "value": escaped}]
    assert back[0]["data"]["a.yaml"] == HOSTILE + f"{base_name(job)}-etcd:2379"  # files are not expanded
    front = next(d for d in back if d["metadata"]["name"].endswith("-frontend") and d["kind"] == "Deployment")
    assert front["spec"]["template"]["spec"]["containers"][0]["args"] == [
        f"--etcd=http://{base_name(job)}-etcd:2379/{escaped}"
    ]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"env": {'BAD"\nNAME': "1"}}, "env name"),
        ({"argv": ["serve", "--peer", "{{node:0}}"]}, r"\{\{node:0\}\} in .*neither a Service"),
        ({"argv": ["serve", "--device-ids", "2,3"]}, "--device-ids 2,3: a pod's 2 GPUs are numbered from 0"),
    ],
)
def test_what_does_not_map_is_refused_with_the_reason(change, why):
    job = _multinode()
    worker = NodeProcess(role=Role.WORKER, node=1, argv=["serve"], gpus=2).model_copy(update=change)
    procs = [worker, NodeProcess(role=Role.ROUTER, node=0, argv=["front"], port=80)]
    with pytest.raises(Refused, match=why):
        manifest(_with(job, procs))


def test_the_sweep_format_writes_a_file_per_deployment_and_notes_the_rest(tmp_path, capsys):
    jobs = [*mapped()[:3], next(j for j in every_job() if j.deployment is None)]
    listing = emit(jobs, "k8s", tmp_path / "out")
    files, notes = k8s_manifests(jobs)
    assert sorted(listing.split()) == sorted(str(tmp_path / "out" / n) for n in files)
    assert notes[-1] == "1 of 4 jobs have no deployment (one server: see --format sh)"
    assert "note: 1 of 4 jobs have no deployment" in capsys.readouterr().err
    for name, text in files.items():
        assert (tmp_path / "out" / name).read_text() == text


def test_one_manifest_goes_to_stdout_several_need_a_directory():
    job = _multinode()
    assert list(yaml.load_all(emit([job], "k8s"), Loader=LOADER)) == manifest(job)
    with pytest.raises(ServelabError, match=r"k8s: 2 manifests \(one per job\) need an output directory"):
        emit(mapped()[:2], "k8s")


def _job_with(pred):
    return next(j for j in deployed() if any(pred(p) for p in j.deployment.processes))


def test_an_endpoint_that_is_a_worker_gets_a_service_on_its_leader_pod_and_side_ports_are_served():
    """vLLM's own server as the endpoint (a worker over several nodes), mooncake_master beside it serving
    its metadata port too."""
    job = _job_with(lambda p: p.role == Role.WORKER and p.argv[:2] == ["vllm", "serve"] and p.port)
    base = base_name(job)
    docs = {(d["kind"], d["metadata"]["name"]): d for d in manifest(job)}
    svc = docs["Service", f"{base}-frontend"]["spec"]
    lws = f"{base}-worker"
    assert svc["selector"] == {
        "leaderworkerset.sigs.k8s.io/name": lws,
        "leaderworkerset.sigs.k8s.io/group-index": "0",
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }
    assert svc["ports"] == [{"name": "main", "port": 8000, "targetPort": 8000}]
    master = docs["Service", f"{base}-mooncake-master"]["spec"]["ports"]
    assert [p["port"] for p in master] == [8700, 8701, 8702]
    (c,) = docs["LeaderWorkerSet", lws]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"][
        "containers"
    ]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["MOONCAKE_TE_META_DATA_SERVER"] == f"http://{base}-mooncake-master:8701/metadata"
    assert env["MOONCAKE_MASTER"] == f"{base}-mooncake-master:8700"
    assert env["MOONCAKE_LOCAL_HOSTNAME"] == "$(LWS_LEADER_ADDRESS)"
    assert c["args"][c["args"].index("--master-addr") + 1] == "$(LWS_LEADER_ADDRESS)"


def test_a_router_reaches_each_worker_at_its_leader_pod():
    job = _job_with(lambda p: "sglang_router.launch_router" in p.argv)
    base = base_name(job)
    dep = job.deployment
    router = dep.processes[dep.endpoint]
    docs = {(d["kind"], d["metadata"]["name"]): d for d in manifest(job)}
    (c,) = docs["Deployment", f"{base}-frontend"]["spec"]["template"]["spec"]["containers"]
    pools = [d for d in docs.values() if d["kind"] == "LeaderWorkerSet"]
    urls = [a for a in c["args"] if a.startswith("http://")]
    assert urls and len(urls) == sum(1 for a in router.argv if a.startswith("http://{{node:"))
    for url in urls:  # http://<lws>-<group>.<lws>:<port>: the leader pod of that group, by its DNS name
        host, port = url.removeprefix("http://").split(":")
        pod, lws = host.split(".")
        assert any(p["metadata"]["name"] == lws for p in pools) and pod.startswith(f"{lws}-")
        assert (
            int(pod.rsplit("-", 1)[1])
            < next(p for p in pools if p["metadata"]["name"] == lws)["spec"]["replicas"]
        )
