"""`servelab bench` against misbehaving servers (a raw asyncio server in a thread of the test process) and
hostile dataset files: every run ends with a one-line verdict and the documented exit code (1: requests
failed, 2: bad input), never a traceback; a result file already there is kept; no worker is left behind."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
from pathlib import Path

import pytest
from fuzzkit import RawServer, hostile, models_body
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MODELS = models_body("m")
TOKEN = b"data: " + json.dumps({"choices": [{"index": 0, "text": " t", "finish_reason": None}]}).encode()
STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"

# mode -> the bytes sent for a completion request before the connection closes (None: special handling)
RESPONSES: dict[str, bytes | None] = {
    "cut": STREAM_HEAD + (TOKEN + b"\n\n") * 3,
    "garbage-status": b"HTTP/1.1 abc nonsense\r\n\r\n",
    "not-http": b"\x00\x01\x02 hello\r\n\r\n",
    "bad-length": b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: abc\r\n\r\n{}",
    "header-flood": b"HTTP/1.1 200 OK\r\n" + b"x-a: " + b"b" * 200_000 + b"\r\n\r\n",
    "bad-json": STREAM_HEAD + b"data: {not json\n\ndata: [DONE]\n\n",
    "wrong-shape": STREAM_HEAD + b'data: {"choices": "x"}\n\ndata: [1, 2]\n\ndata: [DONE]\n\n',
    "error-500": b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 5\r\nconnection: close\r\n\r\noops!",
    "error-json": STREAM_HEAD + b'data: {"error": {"message": "boom"}}\n\ndata: [DONE]\n\n',
    "nan-usage": STREAM_HEAD
    + b'data: {"choices": [], "usage": {"completion_tokens": NaN}}\n\ndata: [DONE]\n\n',
    "empty": b"",
    "reset": None,
    "endless": None,
}


class Server(RawServer):
    """Completions get what RESPONSES holds for `mode` ("reset": a reset after the status line; "endless":
    tokens without end)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        super().__init__(MODELS)

    async def completion(self, w: asyncio.StreamWriter) -> None:
        if self.mode == "reset":
            w.write(b"HTTP/1.1 200 OK\r\n")
            await w.drain()
            w.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            w.transport.abort()
        elif self.mode == "endless":
            w.write(STREAM_HEAD)
            while True:
                w.write((TOKEN + b"\n\n") * 256)
                await w.drain()
        else:
            w.write(RESPONSES[self.mode] or b"")


@pytest.fixture
def server():
    servers: list[Server] = []

    def start(mode: str) -> Server:
        servers.append(Server(mode))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def is_helper(proc: Path) -> bool:
    """multiprocessing's resource tracker and fork server: started once, they live as long as the test
    process, whatever bench does."""
    try:
        cmd = (proc / "cmdline").read_bytes()
    except OSError:
        return True
    return b"resource_tracker" in cmd or b"forkserver" in cmd


def children() -> set[int]:
    """Processes whose parent is this test process (bench workers left behind would show here)."""
    me, found = os.getpid(), set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me and not is_helper(d):
                found.add(int(d.name))
    return found


def bench(url: str, tmp_path: Path, *extra: str) -> tuple[str, ...]:
    return (
        "bench", "--base-url", url, "--model", "m", "--num-prompts", "4", "--num-workers", "1",
        "--random-input-len", "8", "--random-output-len", "8", "--request-timeout", "20",
        "--max-response-mib", "1", "--no-ready-check", "--save-result", "--result-dir", str(tmp_path),
        *extra,
    )  # fmt: skip


@pytest.mark.parametrize("mode", list(RESPONSES))
def test_misbehaving_server(mode, server, tmp_path):
    """Every request fails: exit 1 with a one-line verdict; the result file already there is kept."""
    kept = tmp_path / "earlier.json"
    kept.write_text('{"earlier": "run"}')
    before = children()
    r = hostile(*bench(server(mode).url, tmp_path), codes=(1,), cwd=tmp_path, keep=[kept])
    assert "error" in r.err.lower() or "failed" in r.err.lower(), r.err
    for f in set(tmp_path.glob("*.json")) - {kept}:  # the run's own result says what happened
        assert json.loads(f.read_text())["completed"] == 0
    assert children() <= before, "bench left a worker behind"


FUZZ = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
CUSTOM_FIELDS = ["prompt", "output_len", "conversations", "text"]


@pytest.mark.slow  # 0.8 s of CPU a case: whole benches against misbehaving servers
@FUZZ
@given(
    rows=st.lists(st.dictionaries(st.sampled_from(CUSTOM_FIELDS), json_values, max_size=3), max_size=4),
    dataset=st.sampled_from(["custom", "sharegpt"]),
)
def test_dataset_files(rows, dataset, tmp_path_factory):
    """A dataset file of any shape: refused naming the file (exit 2), or sent to a server that is not there
    (exit 1 or 2, depending on whether the connection or the data is found wanting first)."""
    d = tmp_path_factory.mktemp("ds")
    f = d / ("d.jsonl" if dataset == "custom" else "d.json")
    f.write_text("".join(json.dumps(x) + "\n" for x in rows) if dataset == "custom" else json.dumps(rows))
    r = hostile(
        "bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--no-ready-check", "--num-prompts", "2",
        "--num-workers", "1", "--dataset-name", dataset, "--dataset-path", str(f),
        codes=(1, 2), keep=[f],
    )  # fmt: skip
    if r.code == 2:
        assert str(f) in r.err or "--dataset" in r.err, r.err


CUSTOM_LINES = {
    "not-json": "{prompt",
    "list": "[1, 2]",
    "no-prompt": '{"output_len": 5}',
    "prompt-number": '{"prompt": 5}',
    "negative-output": '{"prompt": "hi", "output_len": -5}',
    "huge-output": '{"prompt": "hi", "output_len": 1e30}',
    "nan-output": '{"prompt": "hi", "output_len": NaN}',
    "binary": "\x00\xff",
}


@pytest.mark.parametrize("name", list(CUSTOM_LINES))
def test_custom_dataset_lines(name, tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(
        '{"prompt": "fine"}\n' + CUSTOM_LINES[name] + "\n", encoding="utf-8", errors="surrogateescape"
    )
    hostile(
        "bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--no-ready-check", "--num-prompts", "2",
        "--dataset-name", "custom", "--dataset-path", str(f),
        names=[str(f)], keep=[f],
    )  # fmt: skip
