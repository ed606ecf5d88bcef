"""The CLI as a user runs it: JSON fields, and bad input as one line with exit code 2."""

import json

import pytest
from clirun import servelab
from pydantic import ValidationError

from servelab.errors import ServelabError
from servelab.recipes.filters import Filters
from servelab.specs import Dtype, load_model


def run(*args):
    return servelab(*args)


def test_models_show_json():
    r = run("models", "show", "deepseek-v4-flash", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert {"total_params", "active_params", "kv_bytes_per_token", "layers"} <= set(data)
    assert data["layers"] == 43 and round(data["kv_bytes_per_token"]) == 3850


def test_estimate_json_fields():
    r = run(
        "estimate",
        "sgl-project/DeepSeek-V4-Flash-FP8",
        "--system",
        "h200_sxm",
        "--tp",
        "8",
        "--ep",
        "8",
        "--batch",
        "16",
        "--isl",
        "4096",
        "--osl",
        "512",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    for field in (
        "ttft_ms",
        "tpot_ms",
        "ttft_ms_low",
        "ttft_ms_high",
        "tpot_ms_low",
        "tpot_ms_high",
        "output_tokens_per_s_per_gpu",
        "tokens_per_s_per_user",
        "memory",
        "provenance",
    ):
        assert field in data


def test_memory_follows_the_engine_kv_rule():
    """vLLM fills a share of the whole GPU; TensorRT-LLM gives the KV cache a share of what is left."""
    got = {}
    for backend in ("vllm", "trtllm"):
        r = run("memory", "deepseek-r1", "--tp", "8", "--ep", "8", "--backend", backend, "--json")
        assert r.returncode == 0, r.stderr
        got[backend] = json.loads(r.stdout)
    v, t = got["vllm"], got["trtllm"]
    # vLLM 0.25.0: 0.92 of the GPU as CUDA reports it (139.8 GiB on the H200), less what its profiling counts
    assert v["usable_gib"] == pytest.approx(0.92 * 139.8)
    assert v["kv_cache_gib"] == pytest.approx(
        v["usable_gib"] - v["weights_gib"] - v["activations_gib"] - v["reserve_gib"]
    )
    assert "gpu_memory_utilization 0.92 x 139.8 GiB (the GPU as CUDA reports it: measured)" in v["source"]
    assert "vLLM 0.25.0, v1/worker/gpu_worker.py determine_available_memory" in v["source"]
    left = t["hbm_gib"] - t["weights_gib"] - t["activations_gib"] - t["reserve_gib"]
    assert t["kv_cache_gib"] == pytest.approx(0.9 * left)
    assert t["max_sequences"] > v["max_sequences"] and t["backend"] == "trtllm"


def test_memory_sizes_the_fp8_mla_cache_as_the_engine_lays_it_out():
    """DeepSeek-R1 with an FP8 KV cache, 61 layers: the engines store the 512 latent and 64 rope dims in
    fp8, 576 bytes a token a layer, where the model's own default is DeepSeek's FlashMLA layout (16 bytes of
    scales, the rope key in bf16: 656), which vLLM keeps for its sparse FlashMLA backend only."""
    per_token = {}
    for backend in ("vllm", "sglang", "trtllm"):
        r = run(
            "memory",
            "deepseek-r1",
            "--tp",
            "8",
            "--ep",
            "8",
            "--kv-dtype",
            "fp8",
            "--backend",
            backend,
            "--json",
        )
        assert r.returncode == 0, r.stderr
        per_token[backend] = json.loads(r.stdout)["kv_bytes_per_token_per_gpu"]
    assert per_token == {"vllm": 61 * 576, "sglang": 61 * 576, "trtllm": 61 * 576}
    model = load_model("deepseek-r1")
    fp8 = model.model_copy(update={"precision": model.precision.model_copy(update={"kv_cache": Dtype.fp8})})
    assert fp8.kv_bytes_per_token == 61 * 656


def test_memory_sglang_uses_its_mem_fraction_static():
    """SGLang on 8 H200s at tp 8: mem_fraction_static 0.896 of the GPU for weights and KV cache; a
    --gpu-memory-utilization given is its --mem-fraction-static."""
    for flags, fraction in (([], 0.896), (["--gpu-memory-utilization", "0.8"], 0.8)):
        r = run("memory", "deepseek-r1", "--tp", "8", "--ep", "8", "--backend", "sglang", "--json", *flags)
        assert r.returncode == 0, r.stderr
        s = json.loads(r.stdout)
        assert s["kv_cache_gib"] == pytest.approx(fraction * s["hbm_gib"] - s["weights_gib"])
        assert f"mem_fraction_static {fraction:g}" in s["source"]


def test_estimate_breakdown_prints_op_kinds():
    r = run("estimate", "llama-3.1-8b", "--batch", "4", "--breakdown")
    assert r.returncode == 0, r.stderr
    assert "attention_decode" in r.stdout and "ffn_gate_up" in r.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (["estimate", "deepseek-v4-flsh"], "did you mean"),
        (["estimate", "llama-3.1-8b", "--system", "h300"], "unknown system"),
        (["estimate", "llama-3.1-70b", "--tp", "3"], "power of two"),
        (["estimate", "deepseek-v3", "--tp", "2"], "does not fit"),
        (["estimate", "deepseek-ai/DeepSeek-V4-Pro", "--tp", "8", "--ep", "8"], "FP8 conversion"),
        (["estimate", "qwen3-32b", "--kv-dtype", "int2"], "--kv-dtype"),
        (["memory", "llama-3.1-70b", "--tp", "0"], "--tp"),
        (["memory", "llama-3.1-70b", "--backend", "tgi"], "--backend: unknown engine 'tgi'"),
        (["sweep", "--node-type", "both"], "--node-type: Input should be 'single-node' or 'multi-node'"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, needle):
    r = run(*args)
    assert r.returncode == 2
    assert needle in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_malformed_config_json(tmp_path):
    (tmp_path / "config.json").write_text("{broken")
    r = run("estimate", str(tmp_path))
    assert r.returncode == 2 and "not valid JSON" in r.stderr


def test_unknown_option_is_a_usage_error_not_a_traceback():
    r = run("estimate", "llama-3.1-8b", "--bogus")
    assert r.returncode == 2 and "No such option" in r.stderr and "Traceback" not in r.stderr


def test_validation_error_names_the_field_or_the_option():
    with pytest.raises(ValidationError) as info:
        Filters(node_type="both", max_conc="many")
    in_library = str(ServelabError.from_validation(info.value, "sweep.yaml"))
    assert in_library.startswith(
        "sweep.yaml: node_type: Input should be 'single-node' or 'multi-node'; max_conc: "
    )
    in_cli = str(ServelabError.from_validation(info.value, as_options=True))
    assert in_cli.startswith("--node-type: Input should be 'single-node' or 'multi-node'; --max-conc: ")
