"""A Llama-3.1-8B-shaped model folder for vLLM's `--load-format dummy` (random weights, made on the GPU): its
config and a word-level tokenizer of the same 128,256-token vocabulary ("w3" ... "w128255"), so a random
prompt of N tokens decodes to text that encodes back to N tokens and every sampled id detokenizes.
Usage: python model.py OUT_DIR   (a python with tokenizers and transformers)"""

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

VOCAB = 128256
CONFIG = {  # meta-llama/Llama-3.1-8B's shape
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
    "vocab_size": VOCAB,
}


def main(out: Path) -> None:
    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2} | {f"w{i}": i for i in range(3, VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(out)
    (out / "config.json").write_text(json.dumps(CONFIG, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
