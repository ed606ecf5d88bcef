"""The meaning of each sweep filter and eval mark, on small stores written here (InferenceX's rules; the
pinned upstream outputs are compared row for row in test_sweep_parity.py)."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from servelab.cli.main import app
from servelab.errors import ServelabError
from servelab.recipes.emit import emit
from servelab.recipes.filters import Filters
from servelab.recipes.matrix import all_evals, mark_evals, matrix
from servelab.recipes.pipelines import to_buildkite, to_github
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import expand

RUNNERS = """\
labels:
  h200:
    - h200-nb_0
    - h200-amd_1
  b200-multinode:
    - b200-nv_0
  cluster:b200-dgxc:
    - b200-dgxc_0
hardware:
  cluster:b200-dgxc:
    available-cpu-dram-mib: 1_000_000
    gpus-per-node: 8
"""

SINGLE = """\
dsr1-fp8-h200-vllm:
  image: vllm/vllm-openai:v0.25.0
  model: deepseek-ai/DeepSeek-R1-0528
  model-prefix: dsr1
  runner: h200
  precision: fp8
  framework: vllm
  scenarios:
    fixed-seq-len:
      - isl: 8192
        osl: 1024
        search-space:
          - {tp: 8, conc-start: 1, conc-end: 64}
          - {tp: 8, ep: 8, dp-attn: true, conc-start: 128, conc-end: 256}
          - {tp: 4, conc-list: [32, 4, 16]}
      - isl: 1024
        osl: 1024
        search-space:
          - {tp: 8, conc-start: 4, conc-end: 8}
gptoss-fp4-h200-tilert:
  image: tilert:v1
  model: openai/gpt-oss-120b
  model-prefix: dsr1x
  runner: h200
  precision: fp4
  framework: tilert
  scenarios:
    fixed-seq-len:
      - isl: 8192
        osl: 1024
        search-space:
          - {tp: 1, conc-start: 16, conc-end: 16}
"""

MULTI = """\
dsr1-fp4-b200-dynamo-trt:
  image: nvcr.io/dynamo:0.5
  model: nvidia/DeepSeek-R1-0528-FP4
  model-prefix: dsr1
  runner: b200-multinode
  precision: fp4
  framework: dynamo-trt
  multinode: true
  disagg: true
  kv-p2p-transfer: nixl
  scenarios:
    fixed-seq-len:
      - isl: 8192
        osl: 1024
        search-space:
          - conc-list: [8, 64, 32]
            prefill: {num-worker: 1, tp: 4, ep: 4, dp-attn: false}
            decode: {num-worker: 1, tp: 8, ep: 8, dp-attn: true}
          - conc-list: [512]
            prefill: {num-worker: 1, tp: 4, ep: 4, dp-attn: false}
            decode: {num-worker: 1, tp: 8, ep: 8, dp-attn: true}
"""

AGENTIC = """\
dsv4-fp4-b200-vllm-agentic:
  image: vllm/vllm-openai:v0.25.0
  model: deepseek-ai/DeepSeek-V4-Pro
  model-prefix: dsv4
  runner: cluster:b200-dgxc
  precision: fp4
  framework: vllm
  scenarios:
    agentic-coding:
      - dram-utilization: 0.5
        search-space:
          - tp: 4
            kv-offloading: dram
            kv-offload-backend: {name: native}
            conc-list: [2, 8]
"""


@pytest.fixture
def ix(tmp_path):
    """A store in InferenceX's configs/ layout: *-master.yaml beside its runners.yaml."""
    d = tmp_path / "configs"
    d.mkdir()
    (d / "runners.yaml").write_text(RUNNERS)
    (d / "a-master.yaml").write_text(SINGLE + MULTI)
    (d / "b-master.yaml").write_text(AGENTIC)
    return open_store(d)


def rows(store, keys=None, **filters):
    return [p.row for p in matrix(store, keys, Filters(**filters))]


def concs(store, key, **filters):
    return [(r["tp"], r["conc"]) for r in rows(store, [key], **filters) if r["isl"] == 8192]


def test_ladders_and_lists_as_written(ix):
    assert concs(ix, "dsr1-fp8-h200-vllm") == [
        *[(8, c) for c in (1, 2, 4, 8, 16, 32, 64)],
        (8, 128),
        (8, 256),
        (4, 32),  # a conc-list keeps its order
        (4, 4),
        (4, 16),
    ]


def test_min_conc_restarts_the_ladder(ix):
    got = concs(ix, "dsr1-fp8-h200-vllm", min_conc=12)
    assert got == [(8, 12), (8, 24), (8, 48), (8, 64), (8, 128), (8, 256), (4, 32), (4, 16)]


def test_max_conc_clamps_and_an_arm_above_it_runs_at_the_cap(ix):
    got = concs(ix, "dsr1-fp8-h200-vllm", max_conc=40)
    assert got == [
        (8, 1),
        (8, 2),
        (8, 4),
        (8, 8),
        (8, 16),
        (8, 32),
        (8, 40),
        (8, 40),
        (4, 32),
        (4, 4),
        (4, 16),
    ]
    assert concs(ix, "dsr1-fp8-h200-vllm", max_conc=2)[-2:] == [
        (8, 2),
        (4, 2),
    ]  # a list falls back to the cap


def test_max_ep_clamps_and_max_tp_drops(ix):
    eps = {(r["ep"], r["dp-attn"]) for r in rows(ix, ["dsr1-fp8-h200-vllm"], max_ep=4)}
    assert eps == {(1, False), (4, True)}
    assert {r["tp"] for r in rows(ix, ["dsr1-fp8-h200-vllm"], max_tp=4)} == {4}


def test_model_prefix_matches_the_key(ix):
    # gptoss-fp4-h200-tilert has model-prefix dsr1x, but InferenceX matches the config key's prefix
    assert {r["model"] for r in rows(ix, model_prefix=["gptoss"])} == {"openai/gpt-oss-120b"}
    assert "openai/gpt-oss-120b" not in {r["model"] for r in rows(ix, model_prefix=["dsr1"])}


def test_runner_type_is_a_label(ix):
    assert {r["runner"] for r in rows(ix, runner_type=["h200"])} == {"h200"}
    with pytest.raises(ServelabError, match="runner type 'h300' is not a label"):
        rows(ix, runner_type=["h300"])


def test_runner_node_filter_gives_a_row_per_node(ix):
    got = rows(ix, ["dsr1-fp8-h200-vllm"], runner_node_filter="h200", seq_lens=["1k1k"])
    assert [(r["conc"], r["runner"]) for r in got] == [
        (4, "h200-nb_0"),
        (4, "h200-amd_1"),
        (8, "h200-nb_0"),
        (8, "h200-amd_1"),
    ]
    jobs = expand(ix, ["dsr1-fp8-h200-vllm"], Filters(runner_node_filter="amd", seq_lens=["1k1k"]))
    assert {j.queue for j in jobs} == {"h200-amd_1"}
    # one launch on two nodes: one fingerprint, two Buildkite steps with their own keys and queues
    both = expand(ix, ["dsr1-fp8-h200-vllm"], Filters(runner_node_filter="h200", seq_lens=["1k1k"]))[:2]
    assert both[0].fingerprint == both[1].fingerprint
    steps = yaml.safe_load(to_buildkite(both))["steps"]
    assert len({s["key"] for s in steps}) == 2
    assert [s["agents"]["queue"] for s in steps] == ["h200-nb_0", "h200-amd_1"]
    assert rows(ix, ["dsr1-fp4-b200-dynamo-trt"], runner_node_filter="amd") == []


def test_sh_scripts_of_one_point_on_two_nodes_do_not_overwrite(ix, tmp_path):
    both = expand(ix, ["dsr1-fp8-h200-vllm"], Filters(runner_node_filter="h200", seq_lens=["1k1k"]))[:2]
    written = [Path(p) for p in emit(both, "sh", tmp_path).split()]
    assert len(written) == 2
    for path, node in zip(written, ("h200-nb_0", "h200-amd_1"), strict=True):
        assert path.name.endswith(f"_{node}.sh")
        assert f'"runner": "{node}"' in path.read_text()


def test_multinode_arm_is_one_row_with_its_concurrency_list(ix):
    first, second = rows(ix, ["dsr1-fp4-b200-dynamo-trt"])
    assert first["conc"] == [8, 64, 32] and second["conc"] == [512]
    assert first["prefill"] == {
        "num-worker": 1,
        "tp": 4,
        "ep": 4,
        "dp-attn": False,
        "pp": 1,
        "dcp-size": 1,
        "pcp-size": 1,
    }
    assert first["kv-p2p-transfer"] == "nixl" and "tp" not in first
    # the highest eligible concurrency of the topology runs the eval
    assert (first["run-eval"], second["run-eval"], second["eval-conc"]) == (False, True, 512)
    assert [r["conc"] for r in rows(ix, ["dsr1-fp4-b200-dynamo-trt"], max_conc=16)] == [[8], [16]]


def test_agentic_rows_and_dram_budget(ix):
    got = rows(ix, ["dsv4-fp4-b200-vllm-agentic"])
    assert [r["exp-name"] for r in got] == [
        "dsv4_tp4_conc2_kvdram-native",
        "dsv4_tp4_conc8_kvdram-native",
    ]
    # 1,000,000 MiB x 0.5 x 4 of 8 GPUs = 262.1 GB
    assert {r["total-cpu-dram-gb"] for r in got} == {262}
    assert got[0]["duration"] == 3600 and got[0]["scenario-type"] == "agentic-coding"
    assert got[0]["run-eval"] is False and "isl" not in got[0]
    evals_only = rows(ix, ["dsv4-fp4-b200-vllm-agentic"], evals_only=True)
    assert [(r["conc"], r["eval-only"]) for r in evals_only] == [(8, True)]


def test_eval_marks_highest_and_median_of_every_arm():
    def row(tp, conc):
        return {
            "model": "m",
            "runner": "r",
            "framework": "vllm",
            "precision": "fp8",
            "isl": 8192,
            "osl": 1024,
            "spec-decoding": "none",
            "dp-attn": False,
            "tp": tp,
            "conc": conc,
        }

    table = [row(8, c) for c in (4, 16, 32, 64)] + [row(4, c) for c in (32, 128)]
    mark_evals(table)
    # concurrencies >= 16 in the group: 16, 32, 64, 128 -> highest 128, median 64; 32 is not marked
    assert [(r["tp"], r["conc"]) for r in table if r["run-eval"]] == [(8, 64), (4, 128)]


def test_all_evals_merges_multinode_rows_of_one_topology(ix):
    points = matrix(ix, ["dsr1-fp4-b200-dynamo-trt"], Filters(all_evals=True))
    assert len(points) == 1
    merged = points[0].row
    assert merged["conc"] == [8, 32, 64, 512] and merged["eval-all-concs"] and merged["eval-only"]
    assert "eval-conc" not in merged
    assert all_evals([]) == []


def test_rows_without_a_launch_are_kept_with_the_reason(ix):
    jobs = expand(ix)
    why = {j.key: j.not_renderable for j in jobs if j.launch is None}
    assert "no launch adapter for framework 'tilert'" in why["gptoss-fp4-h200-tilert"]
    assert "disaggregated" in why["dsr1-fp4-b200-dynamo-trt"]
    assert "agentic-coding" in why["dsv4-fp4-b200-vllm-agentic"]
    multi = next(j for j in jobs if j.key == "dsr1-fp4-b200-dynamo-trt")
    assert [b.conc for b in multi.benches] == [8, 64, 32]
    rendered = next(j for j in jobs if j.key == "dsr1-fp8-h200-vllm")
    assert rendered.not_renderable is None and rendered.launch.argv[:2] == ["vllm", "serve"]
    assert [b.conc for b in rendered.benches] == [rendered.row["conc"]]


def test_unknown_runner_label_keeps_the_row(ix, tmp_path):
    d = tmp_path / "configs"
    (d / "a-master.yaml").write_text(SINGLE.replace("runner: h200", "runner: h200-xyz"))
    jobs = expand(open_store(d), ["dsr1-fp8-h200-vllm"], Filters(seq_lens=["1k1k"]))
    assert [j.row["runner"] for j in jobs] == ["h200-xyz", "h200-xyz"]
    assert all(j.launch is None and "runner label 'h200-xyz' is not in" in j.not_renderable for j in jobs)
    assert {j.queue for j in jobs} == {"h200-xyz"}


def test_a_label_upstream_runs_on_beyond_its_runners_yaml_is_described(ix, tmp_path):
    # InferenceX runs jobs on h200-dgxc, which its runners.yaml does not list: servelab's runners.yaml
    # describes it (upstream's launch_h200-dgxc-slurm.sh nodes), so the jobs launch, with a note
    d = tmp_path / "configs"
    (d / "a-master.yaml").write_text(SINGLE.replace("runner: h200", "runner: h200-dgxc"))
    store = open_store(d)
    jobs = expand(store, ["dsr1-fp8-h200-vllm"], Filters(seq_lens=["1k1k"]))
    assert jobs and all(j.launch is not None and j.not_renderable is None for j in jobs)
    assert {j.queue for j in jobs} == {"h200-dgxc"}
    node = store.runner_labels.node_kind("h200-dgxc")
    assert (node.system, node.gpus_per_node) == ("h200_sxm", 8)
    assert any(
        "runner label 'h200-dgxc' is not in" in n and "servelab's runners.yaml" in n for n in store.notes
    )


def test_test_config_keeps_requested_concurrencies_in_order(ix):
    got = rows(ix, ["dsr1-fp8-h200-vllm"], mode="test-config", conc=[16, 4, 1000])
    assert [(r["tp"], r["conc"]) for r in got] == [(8, 4), (8, 16), (4, 4), (4, 16), (8, 4)]
    with pytest.raises(ServelabError, match="full-sweep filter"):
        rows(ix, ["dsr1-fp8-h200-vllm"], mode="test-config", max_tp=4)


def test_keys_in_pattern_order(ix):
    got = rows(ix, ["gptoss-*", "dsr1-fp8-*"], seq_lens=["8k1k"], max_conc=1)
    assert [r["model-prefix"] for r in got][:1] == ["dsr1x"]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"min_conc": 64, "max_conc": 8}, "min-conc 64 is above max-conc 8"),
        ({"no_evals": True, "all_evals": True}, "no-evals cannot be combined"),
        ({"seq_lens": ["8k"]}, "expected a name such as 1k1k"),
        ({"conc": [4]}, "for test-config mode"),
    ],
)
def test_bad_filters(kwargs, message):
    with pytest.raises((ServelabError, ValueError), match=message):
        Filters(**kwargs)


def test_github_matrices_split_as_inferencex_runs_them(ix):
    jobs = expand(ix)
    families = json.loads(to_github(jobs))
    assert set(families) == {"single-node-8k1k", "single-node-1k1k", "multi-node-8k1k", "agentic"}
    big = json.loads(to_github(jobs * 20))
    sizes = {name: len(m["include"]) for name, m in big.items()}
    assert max(sizes.values()) <= 256
    assert sizes["single-node-8k1k-1"] == 256
    assert sum(v for k, v in sizes.items() if k.startswith("single-node-8k1k-")) == 20 * len(
        families["single-node-8k1k"]["include"]
    )
    evals = json.loads(to_github(expand(ix, [], Filters(evals_only=True))))
    assert set(evals) == {"evals", "multi-node-evals", "agentic-evals"}


def test_cli_takes_inferencex_option_names(tmp_path, ix):
    d = str(tmp_path / "configs")
    argv = [
        "sweep",
        "--dir",
        d,
        "--mode",
        "test-config",
        "--config-keys",
        "dsr1-fp8-h200-vllm",
        "--conc",
        "4",
    ]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert [(j["tp"], j["isl"], j["conc"]) for j in json.loads(result.stdout)] == [
        (8, 8192, 4),
        (4, 8192, 4),
        (8, 1024, 4),
    ]
    result = CliRunner().invoke(app, ["sweep", "--dir", d, "--multi-node", "--runner", "b200-multinode"])
    assert result.exit_code == 0, result.output
    assert {j["config-key"] for j in json.loads(result.stdout)} == {"dsr1-fp4-b200-dynamo-trt"}
    assert "no launch: disaggregated" in result.stderr


def test_lowest_conc_trims_as_inferencex_changelog_does(ix):
    got = rows(ix, ["dsr1-fp8-h200-vllm", "dsr1-fp4-b200-dynamo-trt"], lowest_conc=True, no_evals=True)
    # the conc-list [32, 4, 16] keeps its 4, where it stood; multinode lists keep their lowest
    assert [(r.get("tp"), r.get("isl"), r["conc"]) for r in got] == [
        (8, 8192, 1),
        (8, 8192, 128),
        (4, 8192, 4),
        (8, 1024, 4),
        (None, 8192, [8]),
        (None, 8192, [512]),
    ]
