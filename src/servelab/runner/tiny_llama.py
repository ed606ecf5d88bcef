"""A tiny random-weight Llama with a byte-level BPE tokenizer trained on the spot: a real model for a real
engine in seconds, with nothing downloaded. Built by a python that has torch, transformers and tokenizers
(the vLLM venv's), and cached by its settings.

    python -m servelab.runner.tiny_llama /tmp/tiny-llama --python .venv-vllm/bin/python

builds it in a folder of your choice (docs/run.md's CPU flow)."""

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

_BUILD_SCRIPT = r"""
import json, sys
from pathlib import Path
out = Path(sys.argv[1]); cfg = json.loads(sys.argv[2])
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
import torch
torch.manual_seed(cfg["seed"])
words = ("the of and to in is was for on that with as by at from his her it an be are this which or have "
         "has had not but all they one two new first time year people city state world after also other many "
         "most some only over into would could about than then when where who will can may under while each "
         "between").split()
import random
rnd = random.Random(cfg["seed"])
text = [" ".join(rnd.choice(words) for _ in range(60)) for _ in range(2000)]
tok = Tokenizer(models.BPE(unk_token=None))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=cfg["vocab_size"], special_tokens=["<s>", "</s>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(text, trainer)
tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                   special_tokens=[("<s>", tok.token_to_id("<s>"))])
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                      "{% if add_generation_prompt %}assistant:{% endif %}")
out.mkdir(parents=True, exist_ok=True)
fast.save_pretrained(out)
conf = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                   bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, tie_word_embeddings=False)
LlamaForCausalLM(conf).save_pretrained(out, safe_serialization=True)
print("built", out)
"""


def build_tiny_llama(python: Path, cache_dir: Path, vocab_size: int = 1000, seed: int = 0) -> Path:
    """The model directory (config, weights, tokenizer) under `cache_dir`, built with `python` unless
    cached."""
    settings = {"vocab_size": vocab_size, "seed": seed, "v": 1}
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    return build_at(python, Path(cache_dir) / f"tiny-llama-{key}", settings)


def build_at(python: Path, out: Path, settings: dict | None = None) -> Path:
    """The model built in `out` (left as it is when it already holds one)."""
    settings = settings or {"vocab_size": 1000, "seed": 0, "v": 1}
    if all((out / name).exists() for name in ("config.json", "tokenizer.json", "model.safetensors")):
        return out
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    subprocess.run(
        [str(python), "-c", _BUILD_SCRIPT, str(out), json.dumps(settings)],
        check=True,
        env=env,
        capture_output=True,
        timeout=600,
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Build the tiny random Llama (config, weights, tokenizer) in OUT."
    )
    ap.add_argument("out", type=Path, help="the folder to build it in")
    ap.add_argument(
        "--python",
        type=Path,
        default=Path(".venv-vllm/bin/python"),
        help="a python with torch, transformers and tokenizers (default: the CPU vLLM's, .venv-vllm)",
    )
    args = ap.parse_args(argv)
    if not args.python.exists():
        print(
            f"error: --python {args.python}: no such file (bash scripts/setup_vllm_cpu.sh makes it)",
            file=sys.stderr,
        )
        return 2
    print(build_at(args.python, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
