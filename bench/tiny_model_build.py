"""Build a tiny random-weight Llama and a byte-level BPE tokenizer in a directory (run with the vLLM venv's python).

    .venv-vllm/bin/python bench/tiny_model_build.py OUT_DIR

Nothing is downloaded: the tokenizer is trained on text generated here, the weights are random (seed 0).
Shape from ../shared/reference/test-servers.md (head_dim 64 works on vLLM's CPU backend).
"""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def build(out: str) -> None:
    import random

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8))) for _ in range(2000)]
    text = [" ".join(rng.choice(words) for _ in range(40)) for _ in range(2000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2048, special_tokens=["<s>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=fast.vocab_size, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, torch_dtype="bfloat16")
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out)


if __name__ == "__main__":
    build(sys.argv[1])
