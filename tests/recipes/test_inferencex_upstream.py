"""InferenceX's own files, pinned in tests/data/inferencex (UPSTREAM.md names the commit): both master files
import whole, every key round-trips through `show --as inferencex`, runners.yaml loads, and upstream's rules
(utils/matrix_logic/validation.py) are kept."""

import copy
import functools
import json
import shutil
from pathlib import Path

import pytest
import yaml
from clirun import servelab

from servelab.errors import ServelabError
from servelab.recipes.engines import render
from servelab.recipes.inferencex import MasterEntry, Notes, load_master
from servelab.recipes.recipe_store import parse_recipe_file
from servelab.recipes.runners import parse_runners
from servelab.recipes.workload import recipe_to_workloads
from servelab.recipes.yamlio import dump_yaml, read_yaml

UPSTREAM = Path(__file__).parents[1] / "data" / "inferencex" / "configs"
MASTERS = ["nvidia-master.yaml", "amd-master.yaml"]
# Config keys at the pinned commit (843c6254f): 152 NVIDIA + 56 AMD.
KEYS = {"nvidia-master.yaml": 152, "amd-master.yaml": 56}


@functools.cache
def _raw(name: str) -> dict:
    return yaml.load((UPSTREAM / name).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def raw(name: str) -> dict:
    """The upstream file as a mapping (a fresh copy: tests edit it)."""
    return copy.deepcopy(_raw(name))


@pytest.fixture(scope="module")
def recipes() -> dict:
    """Every pinned key as a servelab recipe, with the upstream mapping it came from."""
    out = {}
    for name in MASTERS:
        data = raw(name)
        out |= {k: (r, data[k]) for k, r in parse_recipe_file(read_yaml(UPSTREAM / name), name).items()}
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A recipe store as InferenceX's configs/ holds it: both master files and its runners.yaml."""
    d = tmp_path_factory.mktemp("ix")
    (d / "recipes").mkdir()
    for name in MASTERS:
        shutil.copy(UPSTREAM / name, d / "recipes" / name)
    shutil.copy(UPSTREAM / "runners.yaml", d / "runners.yaml")
    return d


def run(*args):
    return servelab(*args)


@pytest.mark.slow  # 2.4 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
@pytest.mark.parametrize("name", MASTERS)
def test_master_files_import_whole(name):
    assert len(raw(name)) == KEYS[name]
    assert len(load_master((UPSTREAM / name).read_text(), name)) == KEYS[name]
    r = run("recipes", "import", str(UPSTREAM / name))
    assert r.returncode == 0, r.stderr
    assert len(yaml.safe_load(r.stdout)) == KEYS[name]


@pytest.mark.slow  # 3.4 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_every_key_round_trips_as_inferencex(recipes):
    assert len(recipes) == sum(KEYS.values())
    for key, (recipe, upstream) in recipes.items():
        emitted = yaml.safe_load(dump_yaml({key: recipe.to_master().dump()}))[key]
        assert emitted == upstream, key
        # and with upstream's defaults filled in on both sides
        assert (
            MasterEntry.model_validate(emitted).model_dump()
            == MasterEntry.model_validate(upstream).model_dump()
        )


@pytest.mark.slow  # 1.7 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_the_master_files_use_every_part_of_the_schema(recipes):
    frameworks = {r.framework for r, _ in recipes.values()}
    assert {"atom", "dynamo-sglang", "dynamo-vllm", "dynamo-trt", "llmd-vllm", "tilert"} <= frameworks
    arms = [(kind, arm) for r, _ in recipes.values() for kind, _, _, arm in r.arms()]
    assert any(kind == "agentic-coding" and arm.kv_offload_backend for kind, arm in arms)
    assert any(arm.disagg and arm.decode.num_worker == 0 for _, arm in arms)  # aggregated multinode
    assert any(arm.router for _, arm in arms) and any(r.kv_p2p_transfer for r, _ in recipes.values())


@pytest.mark.slow
def test_show_as_inferencex_from_a_store_of_upstream_files(store, recipes):
    """A multinode key, an atom key, and single- and multinode agentic keys."""
    agentic = [
        next(k for k, (r, _) in recipes.items() if r.scenarios.agentic_coding and r.multinode == m)
        for m in (False, True)
    ]
    for key in ["dsr1-fp4-b200-dynamo-trt", "dsv4-fp4-mi355x-atom", *agentic]:
        r = run("recipes", "show", key, "--as", "inferencex", "--dir", str(store))
        assert r.returncode == 0, r.stderr
        assert yaml.safe_load(r.stdout) == {key: recipes[key][1]}


def test_an_agentic_key_is_not_a_perf_eval_workload(recipes):
    key = next(k for k, (r, _) in recipes.items() if r.scenarios.agentic_coding and r.framework == "vllm")
    with pytest.raises(ServelabError, match="agentic-coding scenarios replay traces"):
        recipe_to_workloads(key, recipes[key][0])


def test_upstream_runners_yaml_loads():
    registry = parse_runners(read_yaml(UPSTREAM / "runners.yaml"), "runners.yaml")
    assert len(registry.runners) == len(raw("runners.yaml")["labels"])
    h100 = registry.get("h100")  # a label whose nodes are of two kinds
    assert h100.kinds == ["h100-cw", "h100-dgxc-slurm"] and h100.node is None and h100.queue == "h100"
    b300 = registry.get("cluster:b300-nv")
    assert b300.hardware and b300.hardware.available_cpu_dram_mib == 2_964_436
    with pytest.raises(ServelabError, match="no one node kind .* add node-kinds"):
        registry.node_kind("h100")


def test_a_checkout_without_node_kinds_takes_each_labels_system_from_its_node_names():
    notes = Notes()
    registry = parse_runners(read_yaml(UPSTREAM / "runners.yaml"), "runners.yaml", notes)
    h100 = registry.node_kind("h100")  # h100-cw and h100-dgxc-slurm nodes: both H100s
    assert (h100.system, h100.gpus_per_node, h100.queue) == ("h100_sxm", 8, "h100")
    b300 = registry.node_kind("cluster:b300-nv")  # its hardware facts, where the label has them
    assert (b300.system, b300.gpus_per_node, b300.cpu_dram_gib) == ("b300_sxm", 8, 2_964_436 // 1024)
    assert registry.node_kind("mi355x").system == "mi355x"
    assert registry.node_kind("rtx6000pro-lat").system == "rtx_pro_6000"
    # a runner naming a node kind rather than a label (InferenceX runs jobs on gb300-nv): its nodes, noted
    gb300 = registry.get("gb300-nv")
    assert gb300.nodes == ["gb300-nv_0", "gb300-nv_1", "gb300-nv_2"] and gb300.node.system == "gb300"
    assert any("'gb300-nv' is not a label" in n for n in notes)
    with pytest.raises(ServelabError, match="'cluster:mi325x-tw' is not a label"):
        registry.get("cluster:mi325x-tw")  # neither a label nor a node kind of this file
    strict = parse_runners(read_yaml(UPSTREAM / "runners.yaml"), "runners.yaml")  # servelab's own reading
    with pytest.raises(ServelabError, match="no one node kind"):
        strict.node_kind("h100")


@pytest.mark.slow  # 1.6 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
@pytest.mark.parametrize(
    "name, undefined", [("nvidia-master.yaml", "h200-dgxc"), ("amd-master.yaml", "cluster:mi325x-tw")]
)
def test_validate_judges_a_master_file_against_the_runners_yaml_beside_it(name, undefined):
    r = run("recipes", "validate", str(UPSTREAM / name), "--json")
    found = json.loads(r.stdout)["recipes"]
    assert len(found) == KEYS[name] and r.returncode == 0
    # every key passes, those on a label upstream's runners.yaml does not define included: servelab's
    # runners.yaml describes the label (its nodes, system and GPUs), and a note says so
    assert all(f["ok"] for f in found)
    assert (
        f"runner label {undefined!r} is not in" in r.stderr
        and "servelab's runners.yaml describes" in r.stderr
    )
    # what servelab cannot judge (frameworks without a launch adapter) is said, not held against the key
    unjudged = [w for f in found for w in f["warnings"] if w.startswith("not checked: ")]
    assert any("no launch adapter for framework" in w for w in unjudged)
    assert "describes no node kinds" in r.stderr


def test_runners_yaml_refuses_both_label_maps():
    with pytest.raises(ServelabError, match="labels: .* or runners:, exactly one"):
        parse_runners({"labels": {"a": ["a_0"]}, "runners": {"a": ["a_0"]}}, "r.yaml")


def _entry(key: str) -> dict:
    for name in MASTERS:
        data = raw(name)
        if key in data:
            return data[key]
    raise KeyError(key)


def _refused(key: str, entry: dict) -> str:
    with pytest.raises(ServelabError) as info:
        load_master(yaml.safe_dump({key: entry}), "nvidia-master.yaml")
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"nvidia-master.yaml: {key}: "), msg
    return msg


def test_a_typo_in_a_field_names_the_key_and_field():
    key = "dsr1-fp4-b200-dynamo-trt"
    e = _entry(key)
    e["kv-p2p-transfr"] = e.pop("kv-p2p-transfer")
    assert "kv-p2p-transfr: Extra inputs are not permitted" in _refused(key, e)
    e = _entry(key)
    e["scenarios"]["fixed-seq-len"][0]["search-space"][0]["prefill"]["num-workers"] = 1
    msg = _refused(key, e)
    assert "search-space.0.prefill.num-workers: Extra inputs are not permitted" in msg


@pytest.mark.parametrize(
    "field,value,message",
    [
        (
            "framework",
            "dynamo-sglan",
            "'dynamo-sglan' is not a framework InferenceX runs .*did you mean dynamo-sglang",
        ),
        ("kv-p2p-transfer", "nixel", "'nixel' is not a KV transfer engine"),
        ("router", {"name": "dynamo-routr", "version": "0.9.1"}, "'dynamo-routr' is not a router"),
        ("router", {"name": "dynamo-router", "version": "image:x"}, "not an image"),
        (
            "router",
            {"name": "dynamo-router", "version": 0.9},
            "router.version: Input should be a valid string",
        ),
    ],
)
def test_a_typo_in_a_value_is_refused(field, value, message):
    key = "dsr1-fp4-b200-dynamo-trt"
    e = _entry(key)
    e[field] = value
    with pytest.raises(ServelabError, match=message):
        load_master(yaml.safe_dump({key: e}), "nvidia-master.yaml")


def _agentic_key(multinode: bool) -> str:
    for name in MASTERS:
        for key, e in raw(name).items():
            if "agentic-coding" in e["scenarios"] and e["multinode"] == multinode:
                return key
    raise LookupError


def test_upstream_rules_are_kept():
    key = "dsr1-fp4-b200-dynamo-trt"
    e = _entry(key)
    del e["kv-p2p-transfer"]
    assert "disagg: true needs kv-p2p-transfer" in _refused(key, e)
    e = _entry(key)
    e["scenarios"]["fixed-seq-len"][0]["search-space"][0]["kv-p2p-transfer"] = "nixl"
    assert "kv-p2p-transfer is declared at the top level or in search-space entries, not both" in _refused(
        key, e
    )
    e = _entry(key)
    e["scenarios"]["fixed-seq-len"][0]["search-space"][0]["tp"] = 8
    assert "sets tp per worker" in _refused(key, e)
    e = _entry(key)
    e["scenarios"]["agentic-codng"] = e["scenarios"].pop("fixed-seq-len")
    assert "'agentic-codng' is not a scenario type" in _refused(key, e)

    key = "dsv4-fp4-mi355x-atom"  # single node
    e = _entry(key)
    e["kv-p2p-transfer"] = "mori"
    assert "kv-p2p-transfer needs multinode: true" in _refused(key, e)

    key = _agentic_key(multinode=False)
    e = _entry(key)
    e["runner"] = "b200"
    assert "runner must be a cluster:<name> label" in _refused(key, e)
    e = _entry(key)
    block = e["scenarios"]["agentic-coding"][0]
    if any(a.get("kv-offloading") == "dram" for a in block["search-space"]):
        block.pop("dram-utilization")
        assert "kv-offloading dram needs dram-utilization" in _refused(key, e)
    e = _entry(key)
    arm = e["scenarios"]["agentic-coding"][0]["search-space"][0]
    arm |= {"kv-offloading": "none", "kv-offload-backend": {"name": "native"}}
    assert "kv-offload-backend needs kv-offloading other than none" in _refused(key, e)
    e = _entry(key)
    e["scenarios"]["agentic-coding"][0]["search-space"][0].pop("kv-offloading")
    e["scenarios"]["agentic-coding"][0]["search-space"][0].pop("kv-offload-backend", None)
    assert "needs kv-offloading" in _refused(key, e)


@pytest.mark.slow  # 1.4 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_frameworks_without_an_adapter_import_but_do_not_render(recipes, store):
    recipe, _ = recipes["dsv4-fp4-mi355x-atom"]
    _, seq, _, arm = next(recipe.arms())
    tilert = recipe.model_copy(update={"framework": "tilert"})  # upstream runs it multinode only
    with pytest.raises(ServelabError, match="servelab has no launch adapter for framework 'tilert' yet"):
        render(tilert, arm, seq.isl + seq.osl + 256)
    # atom has one: the recipe renders ATOM's server command
    r = run("recipes", "render", "dsv4-fp4-mi355x-atom", "--dir", str(store))
    assert r.returncode == 0, r.stderr
    assert "atom.entrypoints.openai_server" in r.stdout
