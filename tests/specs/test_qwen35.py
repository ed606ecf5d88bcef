"""Qwen3.5-397B-A17B embedded offline: its hybrid of Gated DeltaNet linear-attention layers and gated GQA
layers (one in four), read from the checkpoint's config.json pinned from AIConfigurator
(tests/data/aic_model_configs/Qwen3.5-397B-A17B*), the checkpoints it was released as, and the memory one
sequence holds: KV for the 15 full-attention layers, a fixed recurrent state for the 45 linear ones."""

import json
from pathlib import Path

import pytest
from clirun import servelab

from servelab.errors import ServelabError
from servelab.predict.memory import GIB, kv_bytes_per_sequence_per_gpu, memory_per_gpu
from servelab.specs import (
    AttentionKind,
    Dtype,
    GdnAttention,
    LayerAttention,
    Parallel,
    load_model,
    load_system,
)
from servelab.specs.registry import list_checkpoints

PINNED = Path(__file__).resolve().parents[1] / "data" / "aic_model_configs"
EMBEDDED = Path(__file__).resolve().parents[2] / "src/servelab/specs/data/models/qwen3.5-397b-a17b.json"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """No test here may reach the hub: the model is embedded."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_the_embedded_model_is_the_pinned_text_config():
    """Every field the embedded copy keeps equals the checkpoint's text_config (the architecture and the
    tied-embedding flag: its top level), and both parse to one spec (the embedded copy adds Qwen's rule of
    counting the input embedding as active)."""
    upstream = json.loads((PINNED / "Qwen3.5-397B-A17B" / "config.json").read_text())
    embedded = json.loads(EMBEDDED.read_text())
    top = ("architectures", "tie_word_embeddings")
    for key, value in embedded.items():
        if key != "_servelab":
            assert value == (upstream[key] if key in top else upstream["text_config"][key]), key
    pinned = load_model(str(PINNED / "Qwen3.5-397B-A17B"), hub=False)
    ours = load_model("qwen3.5-397b-a17b", hub=False)
    same = {"name": ours.name, "source": ours.source, "active_counts_embedding": True}
    assert pinned.model_copy(update=same) == ours


def test_the_config_parses_to_the_hybrid_shapes():
    m = load_model("Qwen/Qwen3.5-397B-A17B", hub=False)
    att = m.attention
    assert isinstance(att, GdnAttention) and att.kind == AttentionKind.gdn
    assert m.architecture == "Qwen3_5MoeForConditionalGeneration"
    assert m.layer_attention == (LayerAttention.linear,) * 3 + (LayerAttention.full,) + m.layer_attention[4:]
    assert m.layer_kind_counts == {LayerAttention.linear: 45, LayerAttention.full: 15}
    assert [i for i, k in enumerate(m.layer_attention) if k == LayerAttention.full] == list(range(3, 60, 4))
    assert (att.num_heads, att.num_kv_heads, att.head_dim, att.output_gate) == (32, 2, 256, True)
    assert (att.linear_key_heads, att.linear_value_heads, att.linear_key_dim, att.linear_value_dim) == (
        16,
        64,
        128,
        128,
    )
    assert (att.conv_kernel, att.state_dtype, att.conv_channels) == (4, Dtype.fp32, 2 * 16 * 128 + 64 * 128)
    assert m.moe is not None and (m.moe.num_experts, m.moe.experts_per_token, m.moe.intermediate_size) == (
        512,
        10,
        1024,
    )
    assert m.moe.num_shared_experts == 1 and all(m.moe.layers) and m.mtp is not None and m.mtp.num_layers == 1


def test_parameters_are_the_stated_397b_with_17b_active():
    """Qwen states 397B and 17B activated (the input embedding counted, as Qwen counts)."""
    m = load_model("qwen3.5-397b-a17b", hub=False)
    assert m.total_params == pytest.approx(397e9, rel=0.01)
    assert m.active_params == pytest.approx(17e9, rel=0.03)


def test_the_checkpoints_set_their_precision():
    assert {k for k, c in list_checkpoints().items() if c.model == "qwen3.5-397b-a17b"} == {
        "Qwen/Qwen3.5-397B-A17B",
        "Qwen/Qwen3.5-397B-A17B-FP8",
        "nvidia/Qwen3.5-397B-A17B-NVFP4",
    }
    fp8 = load_model("Qwen/Qwen3.5-397B-A17B-FP8", hub=False).precision
    assert (fp8.weights, fp8.experts, fp8.kv_cache) == (Dtype.fp8_block, Dtype.fp8_block, Dtype.bf16)
    # NVIDIA's release keeps both attentions and the shared expert in BF16: only the routed experts are NVFP4
    nvfp4 = load_model("nvidia/Qwen3.5-397B-A17B-NVFP4", hub=False).precision
    assert (nvfp4.weights, nvfp4.experts, nvfp4.kv_cache, nvfp4.unquantized) == (
        Dtype.bf16,
        Dtype.nvfp4,
        Dtype.fp8,
        (),
    )


def test_the_pinned_nvfp4_folder_reads_as_its_checkpoint():
    """NVIDIA's hf_quant_config.json beside its config.json gives the precision the checkpoint entry states:
    its exclude_modules name every layer's linear_attn and self_attn and the shared experts."""
    read = load_model(str(PINNED / "Qwen3.5-397B-A17B-NVFP4"), hub=False).precision
    assert read == load_model("nvidia/Qwen3.5-397B-A17B-NVFP4", hub=False).precision


def test_one_sequence_holds_kv_for_full_layers_and_a_fixed_state_for_linear_ones():
    """By hand, TP 8 (the full layers' 2 KV heads replicated to one a rank; 64 / 8 value heads a rank):
    KV 15 layers x (K + V) x 1 head x 256 x 2 bytes = 15,360 bytes a token; state 45 layers x (8 x 128 x 128
    x 4 bytes of float32 recurrent state + 12,288 / 8 conv channels x 3 tokens x 2 bytes) = 24,007,680."""
    m = load_model("Qwen/Qwen3.5-397B-A17B-FP8", hub=False)
    tp8 = Parallel(tp=8)
    state = 45 * (8 * 128 * 128 * 4 + 12288 // 8 * 3 * 2)
    assert state == 24_007_680 and m.state_bytes_per_sequence(8) == state
    for tokens in (1, 2048, 9216):
        assert kv_bytes_per_sequence_per_gpu(m, tp8, tokens) == tokens * 15 * 2 * 256 * 2 + state
    # the whole model on one GPU: 30,720 bytes a token, 192 MB of state
    assert m.kv_bytes_per_token == 15 * 2 * 2 * 256 * 2
    assert m.state_bytes_per_sequence() == 45 * (64 * 128 * 128 * 4 + 12288 * 3 * 2)


def test_memory_admission_counts_the_state():
    """The sequences that fit are the KV budget over (tokens x bytes a token + the fixed state)."""
    m = load_model("Qwen/Qwen3.5-397B-A17B-FP8", hub=False)
    tp8 = Parallel(tp=8)
    mem = memory_per_gpu(m, load_system("h200_sxm"), tp8, static_fraction=True)
    per_seq = 2048 * 15_360 + 24_007_680
    assert mem.max_sequences(2048, m, tp8) == int(mem.kv_gib * GIB // per_seq)
    # without the state four times as many 2,048-token sequences would fit
    assert mem.max_sequences(2048, m, tp8) < mem.kv_gib * GIB / (2048 * 15_360) / 1.7


def test_tp_must_split_the_linear_key_heads():
    m = load_model("qwen3.5-397b-a17b", hub=False)
    with pytest.raises(ServelabError, match="tp 32 does not divide the 16 linear-attention key heads"):
        Parallel(tp=32).validate(m)


def test_servelab_models_lists_it():
    r = servelab("models")
    assert r.returncode == 0 and "qwen3.5-397b-a17b" in r.stdout


def _config(tmp_path: Path, **change) -> Path:
    cfg = json.loads((PINNED / "Qwen3.5-397B-A17B" / "config.json").read_text())
    cfg["text_config"] = cfg["text_config"] | change
    folder = tmp_path / "qwen35"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"linear_num_key_heads": "16"},
            "linear_num_key_heads: expected an integer >= 1, got '16' (a string)",
        ),
        ({"layer_types": ["linear_attention"] * 59 + ["mamba"]}, "layer_types: unknown 'mamba'"),
        ({"mamba_ssm_dtype": "float8"}, "mamba_ssm_dtype: expected one of float32, bfloat16, float16"),
        (
            {"shared_expert_intermediate_size": 1500},
            "shared_expert_intermediate_size: 1500 is not a multiple",
        ),
    ],
)
def test_a_bad_hybrid_config_is_one_line_naming_the_field(tmp_path, change, message):
    folder = _config(tmp_path, **change)
    with pytest.raises(ServelabError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_model(str(folder), hub=False)
    r = servelab("memory", str(folder), "--tp", "8")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr
