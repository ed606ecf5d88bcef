"""Fixtures: a mock streaming server in its own process (ports 18000-18999), a misbehaving server in a thread
(hostile_server.py), and a tiny local tokenizer."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_server import HostileServer
from portpick import free_port

from servelab.bench.datasets import WORDS


class MockServer:
    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "servelab.bench.mock_server", "--port", str(self.port), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"mock server exited: {self.proc.stderr.read().decode()}") from None
                time.sleep(0.05)
        raise RuntimeError("mock server did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def mock_server():
    """Factory: mock_server('--mode', 'http500', ...) -> MockServer; all are stopped after the test."""
    servers: list[MockServer] = []

    def start(*args: str) -> MockServer:
        s = MockServer(*args)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


@pytest.fixture
def hostile_server():
    """Factory: hostile_server('endless') -> HostileServer (hostile_server.py); all stop after the test."""
    servers: list[HostileServer] = []

    def start(mode: str) -> HostileServer:
        s = HostileServer(mode)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory) -> Path:
    """A byte-level BPE tokenizer trained here on generated text (nothing from a hub)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415 (optional extra)

    d = tmp_path_factory.mktemp("tok")
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    text = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(40)) for i in range(400)]
    tok.train_from_iterator(text, trainer)
    tok.save(str(d / "tokenizer.json"))
    return d
