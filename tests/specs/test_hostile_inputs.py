"""Hostile model configs and command options: every one is a one-line error naming the file and the key (or
the option), exit code 2, never a traceback and never a nonsense answer (top-k above the experts, negative
sizes)."""

import copy
import json
import sys

import pytest
from pydantic import ValidationError

from servelab.cli.main import main
from servelab.errors import ServelabError
from servelab.specs import MoE, load_model
from servelab.specs.registry import DATA


def _embedded(name: str) -> dict:
    return json.loads((DATA / "models" / f"{name}.json").read_text())


DENSE, MOE, MLA, DSV4 = "llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3", "deepseek-v4-flash"
DROP = object()

CONFIG_CASES = [
    # (base model, changes, the key named, what the message says)
    (MOE, {"num_experts_per_tok": 200}, "num_experts_per_tok", "exceeds the 128 experts"),
    (MOE, {"num_experts_per_tok": 0}, "num_experts_per_tok", "expected an integer >= 1, got 0"),
    (MOE, {"num_experts": -4}, "num_experts", "expected an integer >= 0, got -4"),
    (MOE, {"moe_intermediate_size": 0}, "moe_intermediate_size", ">= 1"),
    (MOE, {"decoder_sparse_step": 0}, "decoder_sparse_step", ">= 1"),
    (MOE, {"mlp_only_layers": 5}, "mlp_only_layers", "expected a list of integers"),
    (DENSE, {"num_key_value_heads": 64}, "num_key_value_heads", "must divide the 32 attention heads"),
    (DENSE, {"num_key_value_heads": 3}, "num_key_value_heads", "must divide"),
    (DENSE, {"hidden_size": 0}, "hidden_size", ">= 1, got 0"),
    (DENSE, {"vocab_size": 0}, "vocab_size", ">= 1, got 0"),
    (DENSE, {"num_hidden_layers": -1}, "num_hidden_layers", ">= 1, got -1"),
    (DENSE, {"num_hidden_layers": 32.5}, "num_hidden_layers", "got 32.5 (a float)"),
    (DENSE, {"num_hidden_layers": True}, "num_hidden_layers", "got true (a bool)"),
    (DENSE, {"num_hidden_layers": "32"}, "num_hidden_layers", "got '32' (a string)"),
    (DENSE, {"num_hidden_layers": 10**12}, "num_hidden_layers", "exceeds the maximum"),
    (DENSE, {"hidden_size": float("inf")}, "hidden_size", "got inf (a float)"),
    (DENSE, {"hidden_size": float("nan")}, "hidden_size", "got nan (a float)"),
    (DENSE, {"intermediate_size": -5}, "intermediate_size", ">= 1, got -5"),
    (DENSE, {"head_dim": 0}, "head_dim", ">= 1, got 0"),
    (DENSE, {"head_dim": DROP, "hidden_size": 4001}, "hidden_size", "does not divide over 32 heads"),
    (DENSE, {"max_position_embeddings": 0}, "max_position_embeddings", ">= 1"),
    (DENSE, {"architectures": "Llama"}, "architectures", "expected a list of strings"),
    (DENSE, {"layer_types": [1, 2]}, "layer_types", "expected a list of strings"),
    (DENSE, {"layer_types": ["sliding_attention"]}, "layer_types", "1 entries for 32 layers"),
    (
        DENSE,
        {"layer_types": ["sliding_attention"] * 32, "sliding_window": -5},
        "sliding_window",
        ">= 1, got -5",
    ),
    (DENSE, {"quantization_config": [1]}, "quantization_config", "expected a JSON object"),
    (DENSE, {"quantization_config": {"expert_dtype": "int3"}}, "quantization_config.expert_dtype", "int3"),
    (DENSE, {"_servelab": [1]}, "_servelab", "expected a JSON object"),
    (DENSE, {"tie_word_embeddings": "yes"}, "tie_word_embeddings", "expected true or false"),
    (MLA, {"first_k_dense_replace": 100}, "first_k_dense_replace", "exceeds the maximum 61"),
    (MLA, {"n_shared_experts": -1}, "n_shared_experts", ">= 0, got -1"),
    (MLA, {"num_nextn_predict_layers": -1}, "num_nextn_predict_layers", ">= 0"),
    (MLA, {"kv_lora_rank": 0}, "kv_lora_rank", ">= 1, got 0"),
    (MLA, {"qk_rope_head_dim": -64}, "qk_rope_head_dim", ">= 1"),
    (DSV4, {"compress_ratios": 5}, "compress_ratios", "expected a list of integers"),
    (DSV4, {"hc_mult": 0}, "hc_mult", ">= 1"),
    (DSV4, {"o_groups": 0}, "o_groups", ">= 1"),
    (DSV4, {"o_groups": 7}, "o_groups", "must divide the 64 attention heads"),
    (DSV4, {"index_topk": 0}, "index_topk", ">= 1"),
]


@pytest.mark.parametrize(("base", "changes", "key", "message"), CONFIG_CASES)
def test_a_config_json_with_nonsense_is_refused_naming_file_and_key(tmp_path, base, changes, key, message):
    cfg = copy.deepcopy(_embedded(base))
    for k, v in changes.items():
        if v is DROP:
            del cfg[k]
        else:
            cfg[k] = v
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ServelabError) as err:
        load_model(str(path))
    text = str(err.value)
    assert text.startswith(f"{path}: {key}: ") and message in text and "\n" not in text, text


def test_the_spec_itself_refuses_top_k_above_its_experts():
    with pytest.raises(ValidationError, match="experts_per_token 8 exceeds num_experts 4"):
        MoE(num_experts=4, experts_per_token=8, intermediate_size=64, layers=(True,))


def run_cli(capsys, monkeypatch, *args: str) -> tuple[int, str]:
    """`servelab ARGS` in this process: its exit code and stderr (an uncaught exception fails the test)."""
    monkeypatch.setattr(sys, "argv", ["servelab", *args])
    with pytest.raises(SystemExit) as done:
        main()
    return done.value.code, capsys.readouterr().err


def _files(tmp_path):
    (tmp_path / "adir").mkdir()
    (tmp_path / "list.json").write_text("[]")
    (tmp_path / "binary.json").write_bytes(b"\x89PNG\x00\xff")
    (tmp_path / "deep.json").write_text("[" * 100_000)
    return tmp_path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("models", "show", "{adir}"), "no config.json there"),
        (("models", "show", "{tmp}/list.json"), "expected a JSON object"),
        (("models", "show", "{tmp}/binary.json"), "not valid JSON"),
        (("models", "show", "{tmp}/deep.json"), "not valid JSON"),
        (("models", "show", "{tmp}/missing.json"), "no config.json there"),
        (("models", "show", "a" * 5000), "unknown model"),
        (("memory", "a" * 5000), "unknown model"),
        (("memory", "llama-3.1-8b", "--context", "-5"), "--context: expected 1 to 100,000,000 tokens"),
        (("memory", "llama-3.1-8b", "--context", "0"), "--context: expected 1 to 100,000,000 tokens"),
        (("memory", "llama-3.1-8b", "--max-num-batched-tokens", "0"), "--max-num-batched-tokens: expected"),
        (("memory", "llama-3.1-8b", "--gpu-memory-utilization", "nan"), "--gpu-memory-utilization: must be"),
        (("memory", "llama-3.1-8b", "--gpu-memory-utilization", "1.5"), "--gpu-memory-utilization: must be"),
        (("memory", "llama-3.1-8b", "--weight-dtype", ""), "--weight-dtype: unknown dtype ''"),
        (("memory", "llama-3.1-8b", "--kv-dtype", ""), "--kv-dtype: unknown dtype ''"),
        (("memory", "llama-3.1-8b", "--tp", "-1"), "--tp: "),
        (("estimate", "llama-3.1-8b", "--mode", "agg", "--batch", str(10**23)), "--batch: at most 65536"),
        (("estimate", "llama-3.1-8b", "--batch", "0"), "batch, isl and osl must be at least 1"),
        (("systems", "show", ""), "unknown system ''"),
    ],
)
def test_hostile_options_are_one_line_errors(tmp_path, capsys, monkeypatch, args, message):
    root = _files(tmp_path)
    args = tuple(a.format(adir=root / "adir", tmp=root) for a in args)
    code, err = run_cli(capsys, monkeypatch, *args)
    assert code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1, err
