"""InferenceX master YAML and perf-eval workload files: read as they are, round-tripped without loss."""

import shlex

import pytest
import yaml

from servelab.errors import ServelabError
from servelab.recipes.inferencex import dump_master, load_master
from servelab.recipes.recipe_store import parse_recipe_file
from servelab.recipes.workload import parse_serve_args, parse_workload, recipe_to_workload, workload_to_recipe
from servelab.recipes.yamlio import dump_yaml, load_yaml

EXAMPLE_MASTER = """\
dsv4-fp4-b200-vllm:
  image: vllm/vllm-openai:v0.25.0
  model: deepseek-ai/DeepSeek-V4-Pro
  model-prefix: dsv4
  runner: cluster:b200-dgxc
  precision: fp4
  framework: vllm
  multinode: false
  scenarios:
    fixed-seq-len:
    - isl: 8192
      osl: 1024
      search-space:
      - { tp: 8, conc-start: 1, conc-end: 64 }
      - { tp: 8, ep: 8, conc-start: 128, conc-end: 256 }
      - { tp: 8, ep: 8, dp-attn: true, conc-start: 64, conc-end: 1024 }
"""

MULTINODE = """\
dsr1-fp8-gb200-dynamo:
  image: nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.5.0
  model: deepseek-ai/DeepSeek-R1
  model-prefix: dsr1
  runner: cluster:gb200
  precision: fp8
  framework: dynamo-sglang
  multinode: true
  disagg: true
  kv-p2p-transfer: nixl
  scenarios:
    fixed-seq-len:
    - isl: 1024
      osl: 1024
      search-space:
      - spec-decoding: mtp
        conc-list: [256, 512]
        prefill: {num-worker: 2, tp: 4, ep: 4, dp-attn: true}
        decode: {num-worker: 1, tp: 16, ep: 16, dp-attn: true, additional-settings: [DECODE_MAX_BS=256]}
"""

WORKLOAD = """\
name: deepseek_v4_pro-b200
gpu: B200
num_gpus: 8
nightly: true
vllm:
  model: nvidia/DeepSeek-V4-Pro-NVFP4
  env: { CUDA_HOME: /usr/local/cuda }
  serve_args: --tensor-parallel-size 8 --enable-expert-parallel --max-model-len 32768 --kv-cache-dtype fp8
lm_eval:
  tasks:
    - { name: gsm8k, num_fewshot: 5, model_args: { num_concurrent: 64, max_gen_toks: 8192 } }
bfcl:
  test_categories: [simple_python, multiple, parallel, parallel_multiple, multi_turn]
  num_threads: 16
vllm_bench:
  configs:
    - { name: 8k-in-1k-out-conc-128, dataset: random, input_len: 8192, output_len: 1024,
        num_prompts: 512, max_concurrency: 128 }
"""


@pytest.mark.parametrize("text", [EXAMPLE_MASTER, MULTINODE])
def test_master_round_trip(text):
    original = yaml.safe_load(text)
    assert dump_master(load_master(text)) == original
    # through servelab's recipe and back to InferenceX
    recipes = parse_recipe_file(original, "t")
    assert {k: r.to_master().dump() for k, r in recipes.items()} == original
    # and through servelab's YAML writer
    assert yaml.safe_load(dump_yaml({k: r.dump() for k, r in recipes.items()})) == original


def test_shipped_recipes_export_to_valid_inferencex(shipped):
    for key, recipe in shipped.recipes.items():
        ix = recipe.to_master().dump()
        assert dump_master(load_master(dump_yaml({key: ix}))) == {key: ix}
        assert "engine" not in ix and "evals" not in ix


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda e: e.update(bogus=1), "bogus: Extra inputs are not permitted"),
        (
            lambda e: e["scenarios"]["fixed-seq-len"][0]["search-space"][0].update({"conc-start": 128}),
            "conc-start 128 is above conc-end 64",
        ),
        (
            lambda e: e["scenarios"]["fixed-seq-len"][0]["search-space"][0].update({"conc-list": [1]}),
            "either conc-start/conc-end or conc-list",
        ),
        (
            lambda e: e["scenarios"]["fixed-seq-len"][0]["search-space"][0].update({"dcp-size": 3}),
            "dcp-size 3 must divide tp 8",
        ),
        (
            lambda e: e["scenarios"]["fixed-seq-len"][0]["search-space"][0].update(
                {"spec-decoding": "eagle"}
            ),
            "spec-decoding",
        ),
        (lambda e: e.update(multinode=True), "multinode entries need prefill/decode"),
    ],
)
def test_master_rejects(mutate, message):
    data = yaml.safe_load(EXAMPLE_MASTER)
    mutate(data["dsv4-fp4-b200-vllm"])
    with pytest.raises(ServelabError, match=message):
        load_master(yaml.safe_dump(data))


def test_duplicate_yaml_keys_are_rejected():
    with pytest.raises(ServelabError, match="duplicate key 'image' on line 3"):
        load_yaml("k:\n  image: a\n  image: b\n", "f.yaml")


def test_workload_round_trip(shipped):
    data = yaml.safe_load(WORKLOAD)
    w = parse_workload(data, "w.yaml")
    assert w.dump() == data  # the workload schema itself holds everything
    key, mapping = workload_to_recipe(w, shipped.runner_labels.label_for_gpu(w.gpu), "img:1", "w.yaml")
    recipe = parse_recipe_file({key: mapping}, "w.yaml")[key]
    assert recipe.engine.cuda_home == "/usr/local/cuda"  # CUDA_HOME becomes the typed pin
    assert recipe.runner == "cluster:b200-nb"
    back = recipe_to_workload(key, recipe)
    # serve_args order is servelab's, the flags are the same
    assert sorted(shlex.split(back["vllm"].pop("serve_args"))) == sorted(
        shlex.split(data["vllm"].pop("serve_args"))
    )
    assert back == data


def test_workload_serve_args_that_do_not_split():
    with pytest.raises(ServelabError, match="w.yaml: serve_args: No closing quotation"):
        parse_serve_args("--tensor-parallel-size 8 --served-model-name 'x", "w.yaml")


def test_workload_unknown_flags_are_kept():
    engine, arm, rev = parse_serve_args(
        "--tensor-parallel-size 8 --enable-expert-parallel --max-num-seqs=128 --speculative-config "
        '\'{"method": "mtp", "num_speculative_tokens": 1}\' --async-scheduling --revision abc '
        "--attention_config.use_fp4_indexer_cache=True",
        "w",
    )
    assert arm == {"tp": 8, "ep": 8, "pp": 1, "dp-attn": False}
    assert engine["max-num-seqs"] == 128 and engine["speculative-config"]["method"] == "mtp"
    assert engine["extra-args"] == ["--async-scheduling"] and rev == "abc"
    assert engine["attention-config"] == {"use_fp4_indexer_cache": True}


def test_workload_dp_maps_to_dp_attn():
    _, arm, _ = parse_serve_args("--data-parallel-size 8 --enable-expert-parallel", "w")
    assert arm == {"tp": 8, "ep": 8, "pp": 1, "dp-attn": True}


def test_workload_extra_field_rejected():
    data = yaml.safe_load(WORKLOAD)
    data["vllm"]["serve_flags"] = "x"
    with pytest.raises(ServelabError, match="vllm.serve_flags: Extra inputs are not permitted"):
        parse_workload(data, "w.yaml")
