"""srt-slurm deployments (servelab.recipes.srtslurm) against srtctl itself.

tests/data/srtslurm/captures.json.gz holds what srtctl's own orchestrator started, at the revision
InferenceX's launcher pins, for every recipe of the pinned sweep's multinode jobs
(scripts/srtslurm_capture.py): per worker, frontend and nginx its argv and node. servelab renders each from
the recipe alone; the two must be equal, recipe by recipe, as multisets of (role, node, argv).
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
import yaml
from pinned import pinned_jobs

from servelab.errors import ServelabError
from servelab.recipes import srtslurm
from servelab.recipes.emit import emit
from servelab.recipes.engines.base import Deployment, NodeProcess, Role
from servelab.recipes.srtslurm_jobs import LAUNCHER_EDITS, index, launcher_edit

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "srtslurm"


# libyaml's loader, as servelab's reader of these recipes uses (srtslurm._LOADER): the pure-Python one took
# 11 s of one test's 12 to read the 521 recipes it compares
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str):
    return yaml.load(text, Loader=LOADER)  # noqa: S506 (a safe loader)


@cache
def data() -> tuple[dict, dict]:
    return json.load(gzip.open(DATA / "resolved.json.gz")), json.load(gzip.open(DATA / "captures.json.gz"))


def _normal(s: str, log_dir: str | None) -> str:
    """A captured string with the fake allocation's names (node07, 10.0.0.7) as servelab's placeholders."""
    if log_dir:
        s = s.replace(log_dir, "/logs")
    s = re.sub(r"\bnode(\d\d)(?!\d)", lambda m: srtslurm.node(int(m.group(1))), s)
    return re.sub(r"\b10\.0\.0\.(\d+)\b", lambda m: srtslurm.node(int(m.group(1))), s)


def captured(capture: dict) -> Counter:
    out: Counter = Counter()
    log_dir = None
    for call in capture["stages"]["start_head_infrastructure"]:
        log_dir = call["command"][call["command"].index("--log-dir") + 1]
    for stage in ("start_all_workers", "start_frontend"):
        for call in capture["stages"][stage]:
            argv = tuple(_normal(a, log_dir) for a in call["command"])
            if stage == "start_frontend":
                role = Role.ROUTER
            elif "--disaggregation-mode" in argv:
                role = Role(argv[argv.index("--disaggregation-mode") + 1])
            else:
                role = Role.WORKER
            for n in call["nodelist"]:
                out[(role.value, int(n[4:]), argv)] += 1
    return out


def rendered(deployment) -> Counter:
    return Counter((p.role.value, p.node, tuple(p.argv)) for p in deployment.processes if p.role != Role.SIDE)


WORKERS = (Role.PREFILL, Role.DECODE, Role.WORKER)


def captured_devices(capture: dict) -> Counter:
    """Per worker process: its node and the CUDA_VISIBLE_DEVICES srtctl sets (None: not set)."""
    out: Counter = Counter()
    for call in capture["stages"]["start_all_workers"]:
        for n in call["nodelist"]:
            out[(int(n[4:]), call["env"].get("CUDA_VISIBLE_DEVICES"))] += 1
    return out


def captured_mooncake(capture: dict) -> tuple:
    """The Mooncake master srtctl starts (node, argv), the store config it writes and the workers'
    MOONCAKE_* and MC_* environment, addresses as servelab's placeholders."""
    master = Counter(
        (int(n[4:]), tuple(call["command"]))
        for call in capture["stages"].get("start_mooncake_master", [])
        for n in call["nodelist"]
    )
    files = {k: _normal(v, None) for k, v in (capture.get("files") or {}).items() if "mooncake" in k}
    env = Counter(
        tuple(
            sorted(
                (k, _normal(v, None)) for k, v in call["env"].items() if k.startswith(("MOONCAKE_", "MC_"))
            )
        )
        for call in capture["stages"]["start_all_workers"]
        for _ in call["nodelist"]
    )
    return master, files, env


def rendered_mooncake(deployment) -> tuple:
    procs = deployment.processes
    master = Counter(
        (p.node, tuple(p.argv)) for p in procs if p.role == Role.SIDE and "mooncake" in p.argv[0]
    )
    files = {k: v for k, v in deployment.files.items() if "mooncake" in k}
    env = Counter(
        tuple(sorted((k, v) for k, v in p.env.items() if k.startswith(("MOONCAKE_", "MC_"))))
        for p in procs
        if p.role in WORKERS
    )
    return master, files, env


def rendered_devices(deployment) -> Counter:
    return Counter(
        (p.node, p.env.get("CUDA_VISIBLE_DEVICES")) for p in deployment.processes if p.role in WORKERS
    )


def _render(key: str):
    resolved, captures = data()
    record = resolved[key]
    path, _, selector = record["config"].rpartition(
        ":"
    )  # an override file's variant (srtctl's path:selector)
    recipe = srtslurm.read_recipe(record["recipe"], key, selector=selector if path else None)
    cluster = load_yaml(record.get("srtslurm_yaml") or "") or {}
    model = (cluster.get("model_paths") or {}).get(recipe.model.path, recipe.model.path)
    return srtslurm.render(recipe, key, model, captures[key]["rev"])


@pytest.mark.slow  # 1.8 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_every_recipe_servelab_renders_equals_what_srtctl_starts():
    _, captures = data()
    equal, refused, differ = 0, Counter(), []
    for key, capture in sorted(captures.items()):
        if "error" in capture:  # srtctl itself refused the recipe at that revision
            continue
        try:
            deployment = _render(key)
        except ServelabError as e:
            refused[str(e).split(":")[0]] += 1
            continue
        if (
            captured(capture) == rendered(deployment)
            and captured_devices(capture) == rendered_devices(deployment)
            and captured_mooncake(capture) == rendered_mooncake(deployment)
        ):
            equal += 1
        else:
            differ.append(key)
    assert differ == [], f"{len(differ)} recipes render differently from srtctl, first {differ[:3]}"
    # what is refused is refused with a reason naming the recipe field; most are rendered
    assert equal >= 404, (equal, refused)


def test_the_endpoint_is_the_frontend_and_nats_etcd_run_on_the_infra_node():
    key = next(k for k, c in sorted(data()[1].items()) if "error" not in c and "dynamo-sglang" in k)
    d = _render(key)
    endpoint = d.processes[d.endpoint]
    assert endpoint.role == Role.ROUTER and endpoint.port == srtslurm.FRONTEND_PORT
    sides = {p.argv[0]: p for p in d.processes if p.role == Role.SIDE}
    assert set(sides) == {"nats-server", "etcd"} and {p.node for p in sides.values()} == {0}
    workers = [p for p in d.processes if p.role in (Role.PREFILL, Role.DECODE, Role.WORKER)]
    assert all(p.env["NATS_SERVER"] == f"nats://{srtslurm.node(0)}:4222" for p in workers)
    assert all(p.env["ETCD_ENDPOINTS"] == f"http://{srtslurm.node(0)}:2379" for p in workers)


def test_a_bad_recipe_is_one_line_naming_the_file_and_field():
    with pytest.raises(ServelabError) as e:
        srtslurm.read_recipe("model: {path: m}\nresources: {gpus_per_node: four}\nbackend: {}\n", "r.yaml")
    assert (
        "\n" not in str(e.value)
        and str(e.value).startswith("r.yaml: resources.")
        and "gpu_type" in str(e.value)
    )
    with pytest.raises(ServelabError, match=r"^r\.yaml: an srt-slurm recipe is a mapping"):
        srtslurm.read_recipe("- 1\n", "r.yaml")


def test_an_unknown_revision_is_refused():
    recipe = srtslurm.read_recipe(
        "model: {path: m}\nresources: {gpu_type: b200}\nbackend: {type: sglang}\n", "r.yaml"
    )
    with pytest.raises(ServelabError, match="not a revision servelab knows"):
        srtslurm.render(recipe, "r.yaml", "m", "0" * 40)


@pytest.mark.slow  # 0.8 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_the_sweep_deploys_srt_slurm_jobs_and_says_where_the_recipe_is_from():
    # what `servelab sweep --dir tests/data/inferencex/configs --format json` prints (its emitter), of the
    # pinned sweep expanded once a test process; the sweep-parity cases run the CLI itself
    jobs = json.loads(emit(list(pinned_jobs()), "json"))
    # the other deployments are InferenceX's AMD disaggregated jobs (amd_disagg.py), its TileRT ones
    # (tilert.py) and its llm-d ones (llmd.py): no srt-slurm recipe
    others = {
        j["framework"] for j in jobs if j.get("deployment") and not j["framework"].startswith("dynamo-")
    }
    assert others == {"sglang-disagg", "atom-disagg", "tilert", "llmd-vllm"}
    deployed = [j for j in jobs if j.get("deployment") and j["framework"].startswith("dynamo-")]
    assert len(deployed) >= 250
    assert {j["framework"] for j in deployed} >= {"dynamo-sglang", "dynamo-trt"}
    assert all(j["launch-source"].startswith("srt-slurm ") for j in deployed)
    sources = {j["launch-source"].split(": ", 1)[1].split(" ")[0] for j in deployed}
    assert sources == {
        "checkout",
        "srt-slurm's",
    }  # InferenceX's recipes from the checkout, srt-slurm's pinned
    # a job without one says why, naming the recipe
    forks = [j for j in jobs if "is a fork servelab has no copy of" in (j.get("not-renderable") or "")]
    assert forks and all(j["not-renderable"].startswith("srt-slurm: srt-slurm https://") for j in forks)


def test_each_choice_names_a_revision_with_rules_or_why_not():
    for key, entry in index().items():
        assert "unavailable" in entry or entry["revision"] in srtslurm.REVISIONS, key


def _without_launcher_edits(text: str) -> dict:
    data = load_yaml(text)
    data.pop("name", None)
    data.pop("health_check", None)
    return data


def _source_text(entry: dict) -> str:
    if "inferencex" in entry:
        return (
            ROOT / "tests/data/inferencex/benchmarks/multi_node/srt-slurm-recipes" / entry["inferencex"]
        ).read_text()
    pinned = ROOT / "src/servelab/recipes/data/srtslurm/recipes" / entry["revision"][:12] / entry["srt-slurm"]
    return pinned.read_text()


def _synthetic_length(backend: dict) -> float | None:
    """The acceptance length a recipe srtctl was given carries, if any."""
    for key in srtslurm.SGLANG_ROLE_ENVIRONMENTS:
        if "SGLANG_SIMULATE_ACC_LEN" in (backend.get(key) or {}):
            return float(backend[key]["SGLANG_SIMULATE_ACC_LEN"])
    for cfg in (backend.get("vllm_config") or {}).values():
        spec = (cfg or {}).get("speculative-config")
        if isinstance(spec, str) and "synthetic_acceptance_length" in spec:
            return float(json.loads(spec)["synthetic_acceptance_length"])
    return None


def test_synthetic_acceptance_is_rewritten_as_the_launcher_rewrites_it():
    # the recipe srtctl was given (the launcher's rewrite of it) against servelab's rewrite of the source
    resolved, _ = data()
    checked = Counter()
    for key, entry in sorted(index().items()):
        if "unavailable" in entry:
            continue
        given = resolved[key]["recipe"]
        length = _synthetic_length(load_yaml(given).get("backend") or {})
        if length is None:
            continue
        source = load_yaml(_source_text(entry))
        if _synthetic_length(source.get("backend") or {}) is not None:
            continue  # the recipe itself asks for synthetic acceptance: nothing was rewritten
        srtslurm.with_synthetic_acceptance(source, length, key)
        source.pop("name", None)
        source.pop("health_check", None)
        assert source == _without_launcher_edits(given), key
        checked[(source.get("backend") or {}).get("type", "sglang")] += 1
    assert checked["vllm"] >= 20 and checked["sglang"] >= 3, checked
    with pytest.raises(ServelabError, match="nothing it rewrites"):
        srtslurm.with_synthetic_acceptance({"backend": {"type": "vllm", "vllm_config": {}}}, 2.5, "r.yaml")


def test_the_recipe_is_read_as_the_launcher_s_own_sed_leaves_it():
    # launch_h100-dgxc-slurm.sh adds `dist-timeout: 1800` after each `watchdog-timeout:` of the recipe
    # (SGLang's): servelab's edit of the source equals the recipe srtctl was given, for each of its choices
    resolved, _ = data()
    checked, edited = 0, 0
    for key, entry in sorted(index().items()):
        if "unavailable" in entry or entry.get("launcher") not in LAUNCHER_EDITS:
            continue
        source = _source_text(entry)
        mine = launcher_edit(source, entry["launcher"])
        assert _without_launcher_edits(mine) == _without_launcher_edits(resolved[key]["recipe"]), key
        checked += 1
        edited += mine != source
    assert (checked, edited) == (12, 2)
    text = "a:\n      watchdog-timeout: 5\n      x: 1\n"
    assert launcher_edit(text, "launch_h100-dgxc-slurm.sh") == (
        "a:\n      watchdog-timeout: 5\n      dist-timeout: 1800\n      x: 1\n"
    )
    assert launcher_edit(text, "launch_gb200-nv.sh") == text


def test_nginx_spreads_over_the_frontends_it_fronts():
    key = next(
        k
        for k, c in sorted(data()[1].items())
        if "error" not in c and any(a["command"][0] == "bash" for a in c["stages"]["start_frontend"])
    )
    d = _render(key)
    behind = [p for p in d.processes if p.role == Role.ROUTER and p.port == srtslurm.FRONTEND_BEHIND_NGINX]
    assert behind and d.processes[d.endpoint].argv[0] == "bash"
    conf = d.files["nginx.conf"]
    assert all(f"server {srtslurm.node(p.node)}:8180;" in conf for p in behind) and "listen 8000;" in conf


def _rendered_with(flag: str) -> list:
    _, captures = data()
    out = []
    for key, capture in sorted(captures.items()):
        if "error" in capture or "dynamo-vllm" not in key:
            continue
        try:
            deployment = _render(key)
        except ServelabError:
            continue
        if any(flag in p.argv for p in deployment.processes):
            out.append(deployment)
    return out


def _flag(p, flag: str) -> str:
    return p.argv[p.argv.index(flag) + 1]


def _endpoints(d, flag: str) -> dict:
    """A deployment's data-parallel processes by endpoint (role, leader address, RPC port)."""
    out: dict = {}
    for p in d.processes:
        if flag in p.argv:
            key = (p.role, _flag(p, "--data-parallel-address"), _flag(p, "--data-parallel-rpc-port"))
            out.setdefault(key, []).append(p)
    return out


def test_vllm_data_parallel_runs_a_process_per_gpu_or_per_node():
    # per_gpu (the default): one process per GPU of the endpoint, each rank 0..size-1 once; per_node: one
    # process per node owning its GPUs' ranks, the start ranks 0, local size, 2 x local size ...
    per_gpu, per_node = _rendered_with("--data-parallel-rank"), _rendered_with("--data-parallel-size-local")
    assert len(per_gpu) >= 20 and len(per_node) >= 10, (len(per_gpu), len(per_node))
    for d in per_gpu:
        for procs in _endpoints(d, "--data-parallel-rank").values():
            assert all(p.gpus == 1 for p in procs)
            ranks = sorted(int(_flag(p, "--data-parallel-rank")) for p in procs)
            assert ranks == list(range(int(_flag(procs[0], "--data-parallel-size"))))
    for d in per_node:
        for procs in _endpoints(d, "--data-parallel-size-local").values():
            local = int(_flag(procs[0], "--data-parallel-size-local"))
            assert all(p.gpus == local for p in procs)
            starts = sorted(int(_flag(p, "--data-parallel-start-rank")) for p in procs)
            assert starts == list(range(0, local * len(procs), local))
            assert local * len(procs) == int(_flag(procs[0], "--data-parallel-size"))


def test_sglang_s_own_router_fronts_sglang_s_own_servers():
    # frontend.type sglang: the workers are sglang.launch_server (no Dynamo flags), the endpoint SGLang's
    # router naming each worker's URL, its environment the recipe's frontend env alone
    keys = [
        k for k, c in sorted(data()[1].items()) if "error" not in c and "sglang_router" in str(c["stages"])
    ]
    assert len(keys) >= 10
    for key in keys:
        d = _render(key)
        router = d.processes[d.endpoint]
        workers = [p for p in d.processes if p.role in WORKERS]
        assert router.argv[:3] == ["python", "-m", "sglang_router.launch_router"]
        assert all(p.argv[:3] == ["python3", "-m", "sglang.launch_server"] for p in workers)
        assert not any("--request-plane" in p.argv or "--dump-config-to" in p.argv for p in workers)
        urls = [f"http://{srtslurm.node(p.node)}:{p.port}" for p in workers if p.port]
        assert router.argv[router.argv.index("--worker-urls") + 1 : router.argv.index("--host")] == urls
        assert "ETCD_ENDPOINTS" not in router.env


def test_an_override_file_s_variant_is_base_with_its_section_merged():
    data = {
        "base": {
            "name": "b",
            "resources": {"gpu_type": "b200", "agg_nodes": 1},
            "frontend": {"args": {"x": 1}},
        },
        "override_small": {"resources": {"agg_nodes": 2}, "frontend": None},
        "zip_override_sweep": {"resources": {"agg_nodes": [1, 2, 4], "gpu_type": ["gb200"]}},
        "zip_override_empty": {"resources": {"agg_nodes": 3}},
    }
    small = srtslurm.select_variant(data, "override_small", "r.yaml")
    assert (
        small["resources"] == {"gpu_type": "b200", "agg_nodes": 2} and "frontend" not in small
    )  # null removes
    assert data["base"]["resources"]["agg_nodes"] == 1  # the file itself is not edited
    third = srtslurm.select_variant(data, "zip_override_sweep[2]", "r.yaml")
    assert third["resources"] == {"gpu_type": "gb200", "agg_nodes": 4}  # a one-value list is every variant's
    assert srtslurm.select_variant(data, "base", "r.yaml") == data["base"]
    for bad in (
        "zip_override_sweep[3]",
        "zip_override_sweep",
        "override_*",
        "override_none",
        "zip_override_empty[0]",
    ):
        with pytest.raises(ServelabError, match=r"^r\.yaml: "):
            srtslurm.select_variant(data, bad, "r.yaml")


def test_override_selectors_are_rendered_as_srtctl_resolves_them():
    # CONFIG_FILE `recipe.yaml:selector`: srtctl's own resolve_override_yaml made the recipe it was probed
    # with
    resolved, captures = data()
    keys = [k for k, c in captures.items() if "error" not in c and ":" in resolved[k]["config"]]
    rendered_ = [k for k in keys if k in index() and "unavailable" not in index()[k]]
    assert len(rendered_) >= 10
    for key in rendered_:
        try:
            d = _render(key)
        except ServelabError:
            continue  # refused for another reason (KV events), as the first test counts
        assert captured(captures[key]) == rendered(d), key


def test_kv_events_are_published_on_a_port_per_rank_over_the_deployment():
    # backend.kv_events_config: each worker publishing gets --kv-events-config with its own ZMQ endpoint,
    # 5200 on, one port per process (per data-parallel rank of a per-node process), never two alike
    found = 0
    for key, capture in sorted(data()[1].items()):
        if "error" in capture or "kv_events_config" not in data()[0][key]["recipe"]:
            continue
        d = _render(key)
        events = [
            json.loads(_flag(p, "--kv-events-config")) for p in d.processes if "--kv-events-config" in p.argv
        ]
        ports = [int(e["endpoint"].rsplit(":", 1)[1]) for e in events]
        assert events and all(e["publisher"] == "zmq" and e["topic"] == "kv-events" for e in events), key
        assert len(set(ports)) == len(ports) and min(ports) >= srtslurm.KV_EVENTS_BASE, key
        found += 1
    assert found >= 9


def test_a_mooncake_kv_store_gets_its_master_config_and_worker_environment():
    # backend.mooncake_kv_store: mooncake_master on the infra node, the store config (its address filled in)
    # in /logs, each worker pointed at both; vLLM's own frontend: `vllm serve`, the leader the endpoint
    found = own = 0
    for key, capture in sorted(data()[1].items()):
        if "error" in capture or not capture["stages"].get("start_mooncake_master"):
            continue
        d = _render(key)
        master, files, env = rendered_mooncake(d)
        assert sum(master.values()) == 1 and next(iter(master))[0] == 0, key
        store = json.loads(files[srtslurm.MOONCAKE_STORE_CONFIG])
        assert store["master_server_address"] == f"{srtslurm.node(0)}:{srtslurm.MOONCAKE_MASTER_PORT}"
        assert all(dict(e)["MOONCAKE_CONFIG_PATH"] == "/logs/mooncake_store_config.json" for e in env)
        if d.processes[d.endpoint].argv[:2] == ["vllm", "serve"]:
            own += 1
            assert d.processes[d.endpoint].port == srtslurm.FRONTEND_PORT
            assert not [p for p in d.processes if p.role == Role.ROUTER]
        found += 1
    assert found >= 30 and own >= 14, (found, own)


def test_a_recipe_srtctl_itself_refuses_is_not_rendered():
    # nothing to be equal to: the job keeps srtctl's reason
    _, captures = data()
    refused = [k for k, c in captures.items() if "error" in c]
    assert refused and all(index()[k]["unavailable"].startswith("srtctl at ") for k in refused)


def _groups(deployment) -> Counter:
    """Per MPI group: its role, nodes, GPUs per node, the DYN_SYSTEM_PORT its ranks share and argv."""
    out: Counter = Counter()
    for members in deployment.mpi_groups().values():
        ranks = [deployment.processes[i] for i in members]
        first = ranks[0]
        nodes = tuple(p.node for p in ranks)
        out[(first.role.value, nodes, first.gpus, first.env["DYN_SYSTEM_PORT"], tuple(first.argv))] += 1
    return out


def _captured_groups(capture: dict) -> Counter:
    """What srtctl started per TensorRT-LLM endpoint: one srun over the endpoint's nodes, a task per GPU."""
    log_dir = _log_dir(capture)
    out: Counter = Counter()
    for call in capture["stages"]["start_all_workers"]:
        argv = tuple(_normal(a, log_dir) for a in call["command"])
        mode = argv[argv.index("--disaggregation-mode") + 1] if "--disaggregation-mode" in argv else "worker"
        nodes = tuple(int(n[4:]) for n in call["nodelist"])
        assert call["nodes"] == len(nodes) and call["ntasks"] % len(nodes) == 0
        per_node = call["ntasks"] // len(nodes)
        out[(Role(mode).value, nodes, per_node, call["env"]["DYN_SYSTEM_PORT"], argv)] += 1
    return out


def _log_dir(capture: dict) -> str | None:
    for call in capture["stages"]["start_head_infrastructure"]:
        return call["command"][call["command"].index("--log-dir") + 1]
    return None


@pytest.mark.slow  # 0.9 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_tensorrt_llm_workers_are_grouped_as_srtctl_starts_each_endpoint():
    """Every TensorRT-LLM worker process belongs to an MPI group, one per endpoint: the group's nodes, GPUs
    per node (its tasks per node), shared environment and argv are those of srtctl's one srun for it."""
    _, captures = data()
    keys = [k for k, c in sorted(captures.items()) if "error" not in c and "|dynamo-trt|" in k]
    assert len(keys) >= 170
    spans = Counter()
    for key in keys:
        d = _render(key)
        workers = [p for p in d.processes if p.role in WORKERS]
        assert all(p.mpi_group is not None for p in workers)
        assert not any(p.mpi_group is not None for p in d.processes if p.role not in WORKERS)
        assert _groups(d) == _captured_groups(captures[key]), key
        spans.update(len(m) for m in d.mpi_groups().values())
    assert spans[1] and max(spans) >= 4  # endpoints of one node and of several among them


def _rank(node: int, **change) -> NodeProcess:
    fields = {
        "role": Role.DECODE,
        "node": node,
        "argv": ["trtllm-llmapi-launch", "x"],
        "gpus": 4,
        "mpi_group": 0,
    }
    return NodeProcess.model_validate({**fields, **change})


def test_a_process_of_its_own_dumps_as_before_and_a_group_must_be_one_command():
    front = NodeProcess(role=Role.ROUTER, argv=["frontend"], port=8000)
    d = Deployment(nodes=2, processes=[_rank(0), _rank(1), front], endpoint=2)
    dumped = d.model_dump()
    # the key only where set: a job file of processes of their own reads and fingerprints as before
    assert [p.get("mpi_group", "unset") for p in dumped["processes"]] == [0, 0, "unset"]
    assert Deployment.model_validate(dumped) == d and d.mpi_groups() == {0: [0, 1]}
    for ranks, message in [
        ([_rank(0), _rank(1, env={"DYN_SYSTEM_PORT": "1"})], "its processes differ"),
        ([_rank(0), _rank(1, gpus=8)], "its processes differ"),
        ([_rank(0), _rank(0)], "names node 0 twice"),
        ([_rank(0, gpus=0), _rank(1, gpus=0)], r"gpus >= 1"),
    ]:
        with pytest.raises(ValueError, match=message):
            Deployment(nodes=2, processes=[*ranks, front], endpoint=2)
