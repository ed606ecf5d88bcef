"""A model folder for vLLM's `--load-format dummy` (random weights, made on the GPU) shaped like a published
checkpoint: its config and a word-level tokenizer of the same vocabulary size ("w3" ... "w<V-1>"), so a random
prompt of N tokens decodes to text that encodes back to N tokens and every sampled id detokenizes.
Usage: python model.py OUT_DIR [SHAPE]   (SHAPE: llama-3.1-8b, the default, or qwen3-30b-a3b; a python with
tokenizers and transformers)"""

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

LLAMA_8B = {  # meta-llama/Llama-3.1-8B's shape
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "attention_bias": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
QWEN3_30B_A3B = {  # Qwen/Qwen3-30B-A3B's shape: 48 layers, 128 experts of which 8 routed per token
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "attention_bias": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "decoder_sparse_step": 1,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_sliding_window": False,
    "vocab_size": 151936,
}
SHAPES = {"llama-3.1-8b": LLAMA_8B, "qwen3-30b-a3b": QWEN3_30B_A3B}


def main(out: Path, shape: str) -> None:
    config = SHAPES[shape]
    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2} | {f"w{i}": i for i in range(3, config["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(out)
    (out / "config.json").write_text(json.dumps(config, indent=1))


if __name__ == "__main__":
    shape = sys.argv[2] if len(sys.argv) > 2 else "llama-3.1-8b"
    if shape not in SHAPES:
        print(f"error: SHAPE: expected one of {', '.join(SHAPES)}, got {shape!r}", file=sys.stderr)
        sys.exit(2)
    main(Path(sys.argv[1]), shape)
