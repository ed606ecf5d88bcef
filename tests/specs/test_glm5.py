"""GLM-5 embedded offline: its DSA attention (MLA plus an indexer choosing index_topk keys per query) read
from the checkpoint's config.json, pinned from AIConfigurator (tests/data/aic_model_configs/GLM-5*), and the
checkpoints it was released as."""

import json
from pathlib import Path

import pytest
from clirun import servelab

from servelab.errors import ServelabError
from servelab.specs import AttentionKind, DsaAttention, Dtype, load_model
from servelab.specs.registry import list_checkpoints

PINNED = Path(__file__).resolve().parents[1] / "data" / "aic_model_configs"
LAYERS = 78


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """No test here may reach the hub: the model is embedded."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_the_embedded_model_is_the_pinned_config():
    """Every field the embedded copy keeps equals the checkpoint's own, and both parse to one spec."""
    upstream = json.loads((PINNED / "GLM-5" / "config.json").read_text())
    embedded_file = Path(__file__).resolve().parents[2] / "src/servelab/specs/data/models/glm-5.json"
    embedded = json.loads(embedded_file.read_text())
    assert {k: v for k, v in embedded.items() if k != "_servelab"} == {
        k: upstream[k] for k in embedded if k != "_servelab"
    }
    pinned = load_model(str(PINNED / "GLM-5"), hub=False)
    ours = load_model("glm-5", hub=False)
    assert pinned.model_copy(update={"name": ours.name, "source": ours.source}) == ours


def test_the_config_parses_to_dsa_shapes():
    m = load_model("zai-org/GLM-5", hub=False)
    att = m.attention
    assert isinstance(att, DsaAttention) and att.kind == AttentionKind.dsa
    assert (att.num_heads, att.q_lora_rank, att.kv_lora_rank) == (64, 2048, 512)
    assert (att.qk_nope_head_dim, att.qk_rope_head_dim, att.v_head_dim) == (192, 64, 256)
    assert (att.index_heads, att.index_head_dim, att.index_topk) == (32, 128, 2048)
    assert (m.num_layers, m.hidden_size, m.vocab_size, m.num_dense_layers) == (LAYERS, 6144, 154880, 3)
    assert m.moe is not None and (m.moe.num_experts, m.moe.experts_per_token, m.moe.intermediate_size) == (
        256,
        8,
        2048,
    )
    assert m.moe.num_shared_experts == 1 and m.mtp is not None and m.mtp.num_layers == 1


def test_the_cache_holds_the_latent_and_the_indexer_key():
    """Per token and layer: the MLA latent (512 + 64 rope; BF16, or FlashMLA's FP8 layout of 656 bytes) and
    the indexer key (128 fp8 values and one fp32 scale)."""
    bf16 = load_model("zai-org/GLM-5-FP8", hub=False)
    fp8 = load_model("zai-org/GLM-5-FP8", kv_dtype="fp8", hub=False)
    assert bf16.kv_bytes_per_token == LAYERS * ((512 + 64) * 2 + 132)
    assert fp8.kv_bytes_per_token == LAYERS * (512 + 16 + 64 * 2 + 132)


def test_the_checkpoints_set_their_precision():
    assert {k for k, c in list_checkpoints().items() if c.model == "glm-5"} == {
        "zai-org/GLM-5",
        "zai-org/GLM-5-FP8",
        "nvidia/GLM-5-NVFP4",
    }
    fp8 = load_model("zai-org/GLM-5-FP8", hub=False).precision
    assert (fp8.weights, fp8.experts, fp8.kv_cache) == (Dtype.fp8_block, Dtype.fp8_block, Dtype.bf16)
    nvfp4 = load_model("nvidia/GLM-5-NVFP4", hub=False)
    assert (nvfp4.precision.weights, nvfp4.precision.experts) == (Dtype.nvfp4, Dtype.nvfp4)
    assert nvfp4.precision.kv_cache == Dtype.fp8
    # NVIDIA's release keeps every attention projection, the indexer's included, in BF16
    assert set(nvfp4.precision.unquantized) == {
        "qkv_a_proj",
        "q_b_proj",
        "kv_b_proj",
        "o_proj",
        "indexer_q_proj",
        "indexer_k_proj",
    }
    assert nvfp4.unquantized_attention_params == LAYERS * sum(
        nvfp4.attention.projection_params(nvfp4.hidden_size).values()
    )


@pytest.mark.parametrize(
    ("folder", "checkpoint"), [("GLM-5-FP8", "zai-org/GLM-5-FP8"), ("GLM-5-NVFP4", "nvidia/GLM-5-NVFP4")]
)
def test_a_pinned_release_folder_reads_as_its_checkpoint(folder, checkpoint):
    """The FP8 config's quantization_config, and NVIDIA's hf_quant_config.json beside its config, give the
    precision the embedded checkpoint entry states."""
    read = load_model(str(PINNED / folder), hub=False).precision
    assert read == load_model(checkpoint, hub=False).precision


def test_parameters_are_the_stated_744b_with_40b_active():
    """The publisher states 744B and "40B active", to two figures: servelab counts 40.8B with the LM head
    (DeepSeek's rule, embedded models' default), 39.9B without it."""
    m = load_model("glm-5", hub=False)
    assert m.total_params == pytest.approx(744e9, rel=0.02)
    assert m.active_params == pytest.approx(40e9, rel=0.03)


def _config(tmp_path: Path, **change) -> Path:
    cfg = json.loads((PINNED / "GLM-5" / "config.json").read_text()) | change
    folder = tmp_path / "glm"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"index_topk": "2048"}, "index_topk: expected an integer >= 1, got '2048' (a string)"),
        ({"index_n_heads": 0}, "index_n_heads: expected an integer >= 1, got 0"),
        ({"index_topk_freq": 4}, "index_topk_freq: indexers shared across layers are not modelled"),
    ],
)
def test_a_bad_dsa_config_is_one_line_naming_the_field(tmp_path, change, message):
    folder = _config(tmp_path, **change)
    with pytest.raises(ServelabError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_model(str(folder), hub=False)
    r = servelab("memory", str(folder), "--tp", "8")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr
