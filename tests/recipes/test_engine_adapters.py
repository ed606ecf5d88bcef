"""Engine adapters: the shipped seed recipes render exactly their upstream launch flags; typed refusals."""

from pathlib import Path

import pytest
import yaml

from servelab.errors import ServelabError
from servelab.recipes.engines import JobPoint, render
from servelab.recipes.inferencex import SearchSpaceEntry
from servelab.recipes.recipe_store import open_store
from servelab.recipes.schema import Recipe

IX_CONFIGS = Path(__file__).resolve().parents[1] / "data" / "inferencex" / "configs"

# dsv4f-fp8-b200-vllm as its upstream request launches it: every flag, pin and both arms.
DSV4F_FLAGS = [
    "--max-model-len",
    "9472",
    "--kv-cache-dtype",
    "fp8",
    "--block-size",
    "256",
    "--moe-backend",
    "deep_gemm_mega_moe",
    "--attention_config.use_fp4_indexer_cache=True",
    "--tokenizer-mode",
    "deepseek_v4",
    "--tool-call-parser",
    "deepseek_v4",
    "--enable-auto-tool-choice",
    "--reasoning-parser",
    "deepseek_v4",
    "--max-num-batched-tokens",
    "8192",
    "--max-num-seqs",
    "256",
    "--gpu-memory-utilization",
    "0.95",
    "--enable-prefix-caching",
]
DSV4F_HEAD = [
    "vllm",
    "serve",
    "deepseek-ai/DeepSeek-V4-Flash-0731",
    "--revision",
    "7872f01b1d1fe23eabc4c98b48bffcef5a386062",
    "--host",
    "0.0.0.0",
    "--port",
    "8000",
]


def arm(**kw):
    return SearchSpaceEntry(conc_list=[1], **kw)


def test_dsv4f_latency_arm(shipped):
    r = shipped.get("dsv4f-fp8-b200-vllm")
    launch = render(r, arm(tp=8, ep=8), 9472)
    assert (
        launch.argv == DSV4F_HEAD + ["--tensor-parallel-size", "8", "--enable-expert-parallel"] + DSV4F_FLAGS
    )
    assert launch.env == {}
    assert r.image_digest == "sha256:e1c1ff1af9a15921bfa11d1d95047258c1797392cdbfa296e7639da446b23f97"


def test_dsv4f_dp_arm_is_eight_tp1_replicas(shipped):
    launch = render(shipped.get("dsv4f-fp8-b200-vllm"), arm(tp=8, ep=8, dp_attn=True), 9472)
    assert (
        launch.argv
        == DSV4F_HEAD
        + ["--tensor-parallel-size", "1", "--data-parallel-size", "8", "--enable-expert-parallel"]
        + DSV4F_FLAGS
    )


def test_dsv4f_arms_are_the_recipe_arms(shipped):
    arms = [
        (a.tp_, a.ep_, a.dp_attn_, a.conc_start, a.conc_end)
        for *_, a in shipped.get("dsv4f-fp8-b200-vllm").arms()
    ]
    assert arms == [(8, 8, False, 1, 64), (8, 8, True, 64, 256)]


def test_dsv4_pro_flags_and_pins(shipped):
    # The recipe's typed fields in adapter order, then what upstream's launch profile adds for a TP arm at
    # concurrency 1 (tests/recipes/test_launch_profiles.py holds the whole launch against upstream's script).
    r = shipped.get("dsv4-fp4-b200-vllm")
    launch = render(r, arm(tp=8, ep=8), 9472, job=JobPoint(isl=8192, osl=1024, conc=1))
    assert launch.argv == [
        "vllm",
        "serve",
        "deepseek-ai/DeepSeek-V4-Pro",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "8",
        "--enable-expert-parallel",
        "--max-model-len",
        "9472",
        "--kv-cache-dtype",
        "fp8",
        "--block-size",
        "256",
        "--attention_config.use_fp4_indexer_cache=True",
        "--compilation-config",
        '{"cudagraph_mode":"FULL_AND_PIECEWISE","custom_ops":["all"]}',
        "--tokenizer-mode",
        "deepseek_v4",
        "--tool-call-parser",
        "deepseek_v4",
        "--enable-auto-tool-choice",
        "--reasoning-parser",
        "deepseek_v4",
        "--no-enable-prefix-caching",
        "--trust-remote-code",
        "--max-cudagraph-capture-size",
        "2048",
        "--data-parallel-size",
        "1",
        "--max-num-batched-tokens",
        "8192",
    ]
    assert launch.env == {"CUDA_HOME": "/usr/local/cuda", "VLLM_ENGINE_READY_TIMEOUT_S": "3600"}


def test_megamoe_needs_expert_parallel(shipped):
    with pytest.raises(ServelabError, match="deep_gemm_mega_moe needs expert parallelism"):
        render(shipped.get("dsv4f-fp8-b200-vllm"), arm(tp=8), 9472)


def test_vllm_ep_must_span_the_stage(shipped):
    with pytest.raises(ServelabError, match="set ep to 8 or 1"):
        render(shipped.get("dsv4f-fp8-h200-vllm"), arm(tp=8, ep=4), 2304)


def test_vllm_pp_dcp_and_spec_decoding(shipped):
    r = shipped.get("llama70b-fp8-h200-vllm").model_copy(deep=True)
    a = arm(tp=4, pp=2, dcp_size=2)
    argv = render(r, a, 2304).argv
    assert argv[argv.index("--tensor-parallel-size") :][:6] == [
        "--tensor-parallel-size",
        "4",
        "--pipeline-parallel-size",
        "2",
        "--decode-context-parallel-size",
        "2",
    ]
    with pytest.raises(ServelabError, match="needs engine.speculative-config"):
        render(r, arm(tp=4, spec_decoding="mtp"), 2304)
    r.engine.speculative_config = {"method": "mtp", "num_speculative_tokens": 1}
    argv = render(r, arm(tp=4, spec_decoding="mtp"), 2304).argv
    assert argv[argv.index("--speculative-config") + 1] == '{"method":"mtp","num_speculative_tokens":1}'


def test_sglang_dp_attention(shipped):
    launch = render(shipped.get("dsr1-fp8-h200-sglang"), arm(tp=8, ep=8, dp_attn=True), 9472)
    assert launch.argv == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "deepseek-ai/DeepSeek-R1",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--tp",
        "8",
        "--ep",
        "8",
        "--enable-dp-attention",
        "--dp",
        "8",
        "--context-length",
        "9472",
        "--reasoning-parser",
        "deepseek-r1",
        "--chunked-prefill-size",
        "8192",
        "--mem-fraction-static",
        "0.9",
    ]
    fp8 = render(shipped.get("dsv4f-fp8-h200-sglang"), arm(tp=8, ep=8), 9472).argv
    assert fp8[fp8.index("--kv-cache-dtype") + 1] == "fp8_e4m3"


def test_sglang_refuses_vllm_only_fields(shipped):
    r = shipped.get("dsv4-fp4-b200-vllm").model_copy(update={"framework": "sglang"})
    with pytest.raises(ServelabError, match="engine.attention-config: not supported by the sglang adapter"):
        render(r, arm(tp=8), 9472)


def trt_recipe(**engine):
    return Recipe.model_validate(
        {
            "image": "nvcr.io/nvidia/tensorrt-llm/release:1.0",
            "model": "deepseek-ai/DeepSeek-R1",
            "model-prefix": "dsr1",
            "runner": "cluster:b200-nb",
            "precision": "fp8",
            "framework": "trt",
            "engine": engine,
            "scenarios": {
                "fixed-seq-len": [{"isl": 1024, "osl": 1024, "search-space": [{"tp": 8, "conc-list": [4]}]}]
            },
        }
    )


def test_trtllm_serve_and_options_file():
    r = trt_recipe(
        **{
            "kv-cache-dtype": "fp8",
            "max-num-seqs": 256,
            "max-num-batched-tokens": 8192,
            "moe-backend": "DEEPGEMM",
            "enable-prefix-caching": False,
            "extra-options": {"cuda_graph_config": {"max_batch_size": 256}, "kv_cache_config": {"x": 1}},
        }
    )
    launch = render(r, arm(tp=8, ep=8, dp_attn=True), 2304)
    assert launch.argv == [
        "trtllm-serve",
        "deepseek-ai/DeepSeek-R1",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--backend",
        "pytorch",
        "--tp_size",
        "8",
        "--ep_size",
        "8",
        "--pp_size",
        "1",
        "--max_seq_len",
        "2304",
        "--max_batch_size",
        "256",
        "--max_num_tokens",
        "8192",
        "--extra_llm_api_options",
        "extra-llm-api-config.yml",
    ]
    options = yaml.safe_load(launch.files["extra-llm-api-config.yml"])
    assert options == {
        "enable_attention_dp": True,
        "kv_cache_config": {"dtype": "fp8", "enable_block_reuse": False, "x": 1},
        "moe_config": {"backend": "DEEPGEMM"},
        "cuda_graph_config": {"max_batch_size": 256},
    }


def test_trtllm_refuses_revision_pin():
    r = trt_recipe().model_copy(update={"revision": "abc"})
    with pytest.raises(ServelabError, match="trtllm-serve has no revision flag"):
        render(r, arm(tp=8), 2304)


def test_unknown_framework_suggests():
    r = trt_recipe().model_copy(update={"framework": "vlm"})
    with pytest.raises(ServelabError, match="did you mean vllm"):
        render(r, arm(tp=8), 2304)


def test_recipe_schema_rejects_unknown_and_secret_fields(shipped):
    data = shipped.get("dsv4f-fp8-b200-vllm").dump()
    with pytest.raises(Exception, match="Extra inputs are not permitted"):
        Recipe.model_validate({**data, "engine": {**data["engine"], "kv-cache-dtyp": "fp8"}})
    with pytest.raises(Exception, match="looks like a secret"):
        Recipe.model_validate({**data, "env": {"HF_TOKEN": "hf_abc"}})
    with pytest.raises(Exception, match="image-digest must look like"):
        Recipe.model_validate({**data, "image-digest": "e1c1ff"})
    with pytest.raises(Exception, match="contradicts engine.cuda-home"):
        Recipe.model_validate(
            {
                **data,
                "env": {"CUDA_HOME": "/opt/cuda"},
                "engine": {**data["engine"], "cuda-home": "/usr/local/cuda"},
            }
        )


def atom_recipe(**engine):
    return trt_recipe(**engine).model_copy(
        update={"framework": "atom", "image": "rocm/atom:v1", "runner": "cluster:mi355x-pe"}
    )


def test_atom_renders_its_own_server_command():
    r = atom_recipe(**{"kv-cache-dtype": "fp8", "max-num-seqs": 64, "enable-prefix-caching": False})
    launch = render(r, arm(tp=8, ep=8, dp_attn=True), 2304)
    assert launch.argv == [
        *("python3", "-m", "atom.entrypoints.openai_server", "--model", "deepseek-ai/DeepSeek-R1"),
        *("--host", "0.0.0.0", "--server-port", "8000", "--tensor-parallel-size", "8"),
        *("--enable-expert-parallel", "--enable-dp-attention", "--max-model-len", "2304"),
        *("--kv_cache_dtype", "fp8", "--max-num-seqs", "64", "--no-enable_prefix_caching"),
    ]
    assert launch.port == 8000 and launch.env == {} and launch.files == {}


def test_atom_refuses_what_it_has_no_flag_for():
    with pytest.raises(ServelabError, match="ATOM has no --revision flag"):
        render(atom_recipe().model_copy(update={"revision": "abc"}), arm(tp=8), 2304)
    with pytest.raises(ServelabError, match="engine.tokenizer-mode: not supported by the atom adapter"):
        render(atom_recipe(**{"tokenizer-mode": "slow"}), arm(tp=8), 2304)
    with pytest.raises(ServelabError, match="ATOM takes fp8, fp8_e4m3, bf16, auto"):
        render(atom_recipe(**{"kv-cache-dtype": "fp8_e5m2"}), arm(tp=8), 2304)
    # speculative decoding comes from upstream's launch script (its profile), never invented
    with pytest.raises(ServelabError, match="spec-decoding mtp: ATOM's speculative flags"):
        render(atom_recipe(), arm(tp=8, spec_decoding="mtp"), 2304)


@pytest.mark.slow  # 1.5 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_atom_mtp_key_renders_upstreams_speculative_flags():
    recipe = open_store(IX_CONFIGS).recipes["dsr1-fp4-mi355x-atom-mtp"]
    _, seq, _, a = next(recipe.arms())
    launch = render(recipe, a, seq.isl + seq.osl + 256, 8888, job=JobPoint(isl=seq.isl, osl=seq.osl, conc=4))
    assert launch.argv[:3] == ["python3", "-m", "atom.entrypoints.openai_server"]
    assert launch.argv[launch.argv.index("--method") + 1] == "mtp"
