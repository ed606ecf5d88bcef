"""An optional tokenizer for exact prompt lengths and for counting output tokens when the server sends no
usage: a local path, or a hub id (ORG/NAME) found in the local Hugging Face cache. Nothing is downloaded.
`tokenizers` (a dir with tokenizer.json, or the file itself) is preferred: it is light; `transformers` is the
fallback for tokenizers that only exist in its formats (and the only one that runs remote code)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from servelab.bench.chat_template import Framing, dsv4_prompt, template_framing
from servelab.errors import ServelabError
from servelab.hfhub import hub_cache_dir, snapshots

HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def resolve_tokenizer_path(name: str) -> str:
    """A local path as given; a hub id -> its snapshot folder in the local cache (refs/main first, else the
    newest snapshot with tokenizer files)."""
    if Path(name).expanduser().exists():
        return str(Path(name).expanduser())
    if not HUB_ID.fullmatch(name):
        raise ServelabError(f"--tokenizer {name}: no such file or directory")
    cache = hub_cache_dir()
    for snap in snapshots(name, cache):
        if any((snap / f).exists() for f in TOKENIZER_FILES):
            return str(snap)
    raise ServelabError(
        f"--tokenizer {name}: not a local path and not in the Hugging Face cache {cache} (servelab never "
        f"downloads; fetch it first, e.g. `hf download {name} --include 'tokenizer*'`, or pass a path)"
    )


def _tokenizers():
    """The `tokenizers` module, or None when it is not installed."""
    try:
        import tokenizers  # noqa: PLC0415 (optional extra)
    except ImportError:
        return None
    return tokenizers


class LocalTokenizer:
    """encode/decode without special tokens, the vocabulary size, and the ids a random prompt must avoid.
    `path` is what the user gave (a path or a hub id); `trust_remote_code` is passed to transformers."""

    def __init__(self, path: str, trust_remote_code: bool = False) -> None:
        self.path = path
        p = Path(resolve_tokenizer_path(path))
        self.dir = p if p.is_dir() else p.parent  # where a chat template sits beside the tokenizer
        file = p / "tokenizer.json" if p.is_dir() else p
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        tokenizers = _tokenizers() if file.is_file() and file.suffix == ".json" else None
        if tokenizers is not None:
            self._tok = tokenizers.Tokenizer.from_file(str(file))
            self.kind = "tokenizers"
            self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
            decoder = self._tok.get_added_tokens_decoder()
            self.special_ids = {i for i, t in decoder.items() if t.special}
            self.num_special_to_add = len(self._tok.encode("", add_special_tokens=True).ids)
            return
        try:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from transformers import AutoTokenizer  # noqa: PLC0415 (optional extra, slow to import)
        except ImportError:
            raise ServelabError(
                f"--tokenizer {path}: no tokenizer.json there and `transformers` is not installed"
            ) from None
        try:
            self._hf = AutoTokenizer.from_pretrained(
                str(p), local_files_only=True, trust_remote_code=trust_remote_code
            )
        except Exception as e:  # transformers raises many types; one line is what the user needs
            raise ServelabError(f"--tokenizer {path}: transformers could not load it ({e})") from None
        self.kind = "transformers"
        self.vocab_size = len(self._hf)
        self.special_ids = set(self._hf.all_special_ids)
        self.num_special_to_add = self._hf.num_special_tokens_to_add()

    def encode(self, text: str) -> list[int]:
        if self.kind == "tokenizers":
            return self._tok.encode(text, add_special_tokens=False).ids
        return self._hf.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        if self.kind == "tokenizers":
            return self._tok.decode(ids, skip_special_tokens=False)
        return self._hf.decode(ids)

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def chat_framing(
        self, dsv4: bool, kwargs: dict | None = None, purpose: str = "--use-chat-template"
    ) -> Framing:
        """One user turn framed for the model (servelab.bench.chat_template): DeepSeek-V4's framing, else the
        tokenizer's chat template (transformers' own rendering when transformers loaded the tokenizer), with
        `kwargs` as more template variables (vLLM's --chat-template-kwargs)."""
        if dsv4:
            return dsv4_prompt
        extra = kwargs or {}
        if self.kind == "transformers" and getattr(self._hf, "chat_template", None):
            hf = self._hf
            return lambda text: hf.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False, **extra
            )
        return template_framing(self.dir, self.path, extra, purpose)


def load_tokenizer(path: str | None, trust_remote_code: bool = False) -> LocalTokenizer | None:
    return LocalTokenizer(path, trust_remote_code) if path else None
