"""Validation against the model and system specs (servelab.specs, servelab.predict.memory)."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

import servelab.recipes.validate as validate_module
from servelab.engines.names import Engine
from servelab.engines.settings import ServerSettings
from servelab.recipes.recipe_store import open_store
from servelab.recipes.schema import Recipe
from servelab.recipes.validate import validate_recipe, validate_store


def recipe(model, runner="cluster:h200-nb", space=None, **extra):
    return Recipe.model_validate(
        {
            "image": "img:1",
            "model": model,
            "model-prefix": "x",
            "runner": runner,
            "precision": "fp8",
            "framework": "vllm",
            **extra,
            "scenarios": {
                "fixed-seq-len": [
                    {
                        "isl": 1024,
                        "osl": 1024,
                        "search-space": space or [{"tp": 8, "conc-start": 4, "conc-end": 64}],
                    }
                ]
            },
        }
    )


@pytest.mark.parametrize(
    "key",
    [
        "dsv4-fp4-b200-vllm",
        "dsv4f-fp8-b200-vllm",
        "dsv4f-fp8-h200-vllm",
        "dsv4f-fp8-h200-sglang",
        "dsr1-fp8-h200-sglang",
        "llama70b-fp8-h200-vllm",
    ],
)
def test_shipped_recipes_validate(shipped, key):
    rep = validate_recipe(key, shipped.get(key), shipped.runner_labels)
    assert rep.errors == []
    assert any("fits" in n for n in rep.notes)


def test_gptoss_on_h200_validates(shipped):
    rep = validate_recipe("gptoss-fp4-h200-vllm", shipped.get("gptoss-fp4-h200-vllm"), shipped.runner_labels)
    assert rep.errors == []


def test_runners_agree_with_system_specs(shipped):
    assert shipped.runner_labels.check_against_specs() == []
    reports = validate_store(shipped)
    assert reports[0].key != "runners.yaml"


def test_fp4_experts_on_hopper_point_to_fp8_conversion(shipped):
    rep = validate_recipe(
        "k",
        recipe("deepseek-ai/DeepSeek-V4-Pro", space=[{"tp": 8, "ep": 8, "conc-list": [4]}]),
        shipped.runner_labels,
    )
    assert len(rep.errors) == 1
    assert "FP4" in rep.errors[0] and "sgl-project/DeepSeek-V4-Pro-FP8" in rep.errors[0]


def test_does_not_fit_in_memory(shipped):
    # Llama-3.1-70B in BF16 is about 141 GB of weights: more than one H200 holds.
    rep = validate_recipe(
        "k",
        recipe("meta-llama/Llama-3.1-70B-Instruct", space=[{"tp": 1, "conc-list": [4]}]),
        shipped.runner_labels,
    )
    assert len(rep.errors) == 1 and "does not fit" in rep.errors[0]


def test_long_context_must_fit_kv(shipped):
    r = recipe(
        "nvidia/Llama-3.1-70B-Instruct-FP8",
        space=[{"tp": 2, "conc-list": [1]}],
        engine={"max-model-len": 4_000_000},
    )
    rep = validate_recipe("k", r, shipped.runner_labels)
    assert len(rep.errors) == 1 and "4000000-token sequence does not fit the KV cache" in rep.errors[0]


def test_heads_must_divide(shipped, tmp_path):
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": 4,
        "hidden_size": 2560,
        "intermediate_size": 6912,
        "num_attention_heads": 20,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "vocab_size": 32000,
        "max_position_embeddings": 8192,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = recipe("org/odd-model", spec={"model": str(tmp_path / "config.json")})
    rep = validate_recipe("k", r, shipped.runner_labels)
    assert len(rep.errors) == 1 and "20 attention heads do not divide over tp 8" in rep.errors[0]


def test_more_gpus_than_a_node(shipped):
    rep = validate_recipe(
        "k", recipe("deepseek-ai/DeepSeek-R1", space=[{"tp": 16, "conc-list": [4]}]), shipped.runner_labels
    )
    assert rep.errors and "needs 16 GPUs" in rep.errors[0]


def test_megamoe_is_blackwell_only(shipped):
    r = recipe(
        "sgl-project/DeepSeek-V4-Flash-FP8",
        space=[{"tp": 8, "ep": 8, "conc-list": [4]}],
        engine={"moe-backend": "deep_gemm_mega_moe"},
    )
    rep = validate_recipe("k", r, shipped.runner_labels)
    assert any("Blackwell-only" in e for e in rep.errors)


def test_unknown_model_and_runner(shipped):
    rep = validate_recipe("k", recipe("org/unknown-model"), shipped.runner_labels)
    assert rep.errors and "add spec: {model: NAME}" in rep.errors[0]
    rep = validate_recipe(
        "k", recipe("deepseek-ai/DeepSeek-R1", runner="cluster:h200-n"), shipped.runner_labels
    )
    assert rep.errors and "did you mean cluster:h200-nb" in rep.errors[0]


def test_wrong_gpus_per_node_is_caught(store_dir):
    p = store_dir / "runners.yaml"
    p.write_text(
        p.read_text().replace(
            "gpus-per-node: 8\n    cpu-dram-gib: 2048\n    queue: h200-nb",
            "gpus-per-node: 4\n    cpu-dram-gib: 2048\n    queue: h200-nb",
        )
    )
    problems = open_store(store_dir).runner_labels.check_against_specs()
    assert problems == [
        f"{store_dir}/runners.yaml: node-kinds.h200-nb.gpus-per-node is 4 but system h200_sxm has 8 "
        "GPUs per node"
    ]


UPSTREAM = Path(__file__).resolve().parents[1] / "data" / "inferencex" / "configs"


def upstream_store(tmp_path, keys):
    """Upstream master keys as they are, on servelab's shipped node kinds (h200, b200 -> the -nb nodes)."""
    master = yaml.safe_load((UPSTREAM / "nvidia-master.yaml").read_text())
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "ix.yaml").write_text(yaml.safe_dump({k: master[k] for k in keys}))
    shipped = (Path(validate_module.__file__).parent / "data" / "runners.yaml").read_text()
    labels = "runners:\n  h200: [h200-nb_0]\n  b200: [b200-nb_0]\n"
    (tmp_path / "runners.yaml").write_text(shipped.replace("runners:\n", labels, 1))
    return open_store(tmp_path)


@pytest.mark.slow  # 1.0 s of CPU a case: the pinned InferenceX master imported and validated
@pytest.mark.parametrize("key", ["dsv4-fp8-h200-vllm", "dsv4-fp8-h200-sglang"])
def test_dsv4_pro_on_h200_runs_fp4_experts_without_fp4_tensor_cores(tmp_path, key):
    # vLLM --quantization deepseek_v4_fp8 / SGLang's Marlin MoE (from upstream's launch profile) keep the
    # FP4 experts in memory and need no FP4 tensor cores; the same model without them is refused on Hopper.
    store = upstream_store(tmp_path, [key])
    rep = validate_recipe(key, store.recipes[key], store.runner_labels)
    assert rep.errors == []
    assert any("runs the FP4 experts without FP4 tensor cores" in n for n in rep.notes)
    plain = store.recipes[key].model_copy(update={"model_prefix": "other"})
    rep = validate_recipe(key, plain, store.runner_labels)
    assert any("need FP4 tensor cores" in e for e in rep.errors)


@pytest.mark.slow  # 1.2 s of CPU a case: the pinned InferenceX master imported and validated
@pytest.mark.parametrize("key", ["dsr1-fp8-b200-sglang", "dsr1-fp8-b200-trt"])
def test_dsr1_fp8_tp4_on_b200_fits_as_upstream_runs_it(tmp_path, key):
    # 159.4 GiB of weights a GPU: SGLang budgets weights + KV at --mem-fraction-static 0.95 (activations and
    # the reserve outside it), TensorRT-LLM gives the KV cache a share of what is left; vLLM 0.25's 0.92 of
    # 180 GiB (165.6 GiB for everything) holds it with 0.92 x 180 - 159.4 - 3.67 (the V1 runner's profile
    # peak with the fused-MoE workspace) - 0.5 (non-torch) - 0.98 (CUDA graphs) = 1.0 GiB of KV (a 0.9
    # share, 162 GiB, would not).
    store = upstream_store(tmp_path, [key])
    rep = validate_recipe(key, store.recipes[key], store.runner_labels)
    assert rep.errors == []
    tp4 = [n for n in rep.notes if ": tp4 fits" in n]
    assert tp4 and "159.4 GiB weights" in tp4[0]
    as_vllm = store.recipes[key].model_copy(update={"framework": "vllm", "model_prefix": "other"})
    rep = validate_recipe(key, as_vllm, store.runner_labels)
    assert rep.errors == []
    assert any(": tp4 fits: 159.4 GiB weights, 1.0 GiB KV per GPU" in n for n in rep.notes)


def test_atom_counts_its_memory_share_as_vllm_does():
    # ATOM's --gpu-memory-utilization is a share of the whole GPU (its model runner: utilization x total),
    # as vLLM's: validate takes the launch's value as it is, not the recipe's default
    launched = ServerSettings(memory_fraction=0.75)
    e = SimpleNamespace(gpu_memory_utilization=None)
    share_of_gpu = {"gpu_memory_utilization": 0.75, "static_fraction": False, "fraction_of_free": False}
    for engine in (Engine.VLLM, Engine.ATOM):
        assert validate_module._kv_rule(engine, launched, e, "vllm/vllm-openai:v0.25.0") == share_of_gpu
    # unset, vLLM's share is its release's default (0.9 before 0.20.0, 0.92 from it)
    assert (
        validate_module._kv_rule(Engine.VLLM, None, e, "vllm/vllm-openai:v0.19.0")["gpu_memory_utilization"]
        == 0.9
    )
    assert (
        validate_module._kv_rule(Engine.VLLM, None, e, "vllm/vllm-openai:v0.25.0")["gpu_memory_utilization"]
        == 0.92
    )
    # SGLang's and TensorRT-LLM's shares keep their own rules; unset, each rule takes its engine's default
    assert validate_module._kv_rule(Engine.SGLANG, None, e, "lmsysorg/sglang:v0.5.9")["static_fraction"]
    trt = validate_module._kv_rule(Engine.TRTLLM, None, e, "nvcr.io/nvidia/tensorrt-llm/release:1.2.0")
    assert trt["fraction_of_free"] and trt["gpu_memory_utilization"] is None
