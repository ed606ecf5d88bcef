"""Prompt text for a trace's requests: each hash id is a block of `block_size` words, the same words wherever
the id appears in a session, so a turn that repeats the ids of the history repeats its text and the server's
prefix cache sees the shared prefix the recording had (InferenceX's replay builds prompts from the ids the
same way: the recorded history, not the server's answers, is what the next turn carries).

Words are the load generator's one-token words (servelab.bench.datasets.WORDS, each with its leading space),
so a block is about `block_size` tokens in common BPE vocabularies and blocks tokenize independently of their
neighbours. A block's words come from a hash of (salt, id): each replay of a session has its own salt, and
each run its own nonce in it, so two replays of one trace, or two points of a sweep against one server, never
share cache entries (InferenceX busts the cache between replays too); a trace whose ids are global
(`hash_id_scope: global`) shares one salt per pass over the file.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from servelab.bench.agentic.trace import TraceRequest
from servelab.bench.datasets import WORDS

PIECES = tuple(" " + w for w in WORDS)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_TAIL = 0x7A11  # salt offset of the words past a prompt's last block


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on an array of uint64 (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def block_texts(ids: Sequence[int], salt: int, size: int) -> list[str]:
    """The text of each block id under `salt`: `size` words each."""
    if not len(ids):
        return []
    keys = np.asarray(ids, dtype=np.int64).view(np.uint64)
    seed = _mix(np.array([salt & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    keys = _mix(keys ^ seed)
    j = np.arange(1, size + 1, dtype=np.uint64) * _GOLDEN
    idx = _mix(keys[:, None] + j[None, :]) % np.uint64(len(PIECES))
    return ["".join([PIECES[i] for i in row]) for row in idx.tolist()]


def _words(text: str, n: int) -> str:
    """The first n words of a block's text (each word keeps its leading space)."""
    if n <= 0:
        return ""
    cut = 0
    for _ in range(n):
        cut = text.find(" ", cut + 1)
        if cut < 0:
            return text
    return text[:cut]


class StreamPrompt:
    """The prompt of one stream of a session replay (the main agent, or a subagent): its blocks' texts,
    updated request by request from what each keeps of the previous one."""

    def __init__(self, salt: int, block_size: int) -> None:
        self.salt = salt
        self.block_size = block_size
        self.blocks: list[str] = []

    def text(self, req: TraceRequest) -> str:
        """The request's prompt: its blocks (the kept ones reused, the new ones made), cut or extended to its
        input tokens (one word each); never empty."""
        self.blocks = self.blocks[: req.keep] + block_texts(req.new_ids, self.salt, self.block_size)
        n = max(1, req.input_tokens)
        full, rest = divmod(n, self.block_size)
        if full >= len(self.blocks):
            extra = n - len(self.blocks) * self.block_size
            return "".join(self.blocks) + _tail(self.salt, req.index, extra)
        return "".join(self.blocks[:full]) + _words(self.blocks[full], rest)


def _tail(salt: int, index: int, n: int) -> str:
    """n words of the request's own, past its last block (prompts longer than their hashed blocks)."""
    if n <= 0:
        return ""
    size = 256
    ids = [-(index + 1) * (1 << 20) - k for k in range(-(-n // size))]
    return _words("".join(block_texts(ids, salt ^ _TAIL, size)), n)
