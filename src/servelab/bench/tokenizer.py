"""An optional local tokenizer (a path) for exact prompt lengths and for counting output tokens when the
server sends no usage. `tokenizers` (a dir with tokenizer.json, or the file itself) is preferred: it is light;
`transformers` is the fallback for tokenizers that only exist in its formats. Nothing loads from a hub."""

from __future__ import annotations

import os
from pathlib import Path

from servelab.errors import ServelabError


class LocalTokenizer:
    """encode/decode without special tokens, the vocabulary size, and the ids a random prompt must avoid."""

    def __init__(self, path: str) -> None:
        self.path = path
        p = Path(path)
        file = p / "tokenizer.json" if p.is_dir() else p
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        if file.is_file() and file.suffix == ".json":
            try:
                from tokenizers import Tokenizer  # noqa: PLC0415 (optional extra)
            except ImportError:
                Tokenizer = None
            if Tokenizer is not None:
                self._tok = Tokenizer.from_file(str(file))
                self.kind = "tokenizers"
                self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
                decoder = self._tok.get_added_tokens_decoder()
                self.special_ids = {i for i, t in decoder.items() if t.special}
                self.num_special_to_add = len(self._tok.encode("", add_special_tokens=True).ids)
                return
        if not p.exists():
            raise ServelabError(f"--tokenizer {path}: no such file or directory (a local path is expected)")
        try:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from transformers import AutoTokenizer  # noqa: PLC0415 (optional extra, slow to import)
        except ImportError:
            raise ServelabError(
                f"--tokenizer {path}: no tokenizer.json there and `transformers` is not installed"
            ) from None
        try:
            self._hf = AutoTokenizer.from_pretrained(path, local_files_only=True)
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


def load_tokenizer(path: str | None) -> LocalTokenizer | None:
    return LocalTokenizer(path) if path else None
