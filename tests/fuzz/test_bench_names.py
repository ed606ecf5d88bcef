"""Names that become file names and what a server streams back: `bench --save-result` with a --label holding
`/` or `..`, a model id (from the server's /v1/models) that is NUL, a number, 300 characters or a path; an SSE
event holding JSON nested deeper than the parser follows. The result is saved inside --result-dir under a
name the file system takes (or refused before any request), never lost after the whole benchmark, and the
client never dies on what a server sends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from fuzzkit import RawServer, hostile, models_body

from servelab.bench import result as R

EVENT = b"data: " + json.dumps({"choices": [{"index": 0, "text": " t", "finish_reason": None}]}).encode()
STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
GOOD_STREAM = (
    STREAM_HEAD
    + (EVENT + b"\n\n") * 2
    + b'data: {"choices": [{"text": "", "finish_reason": "length"}]}\n\ndata: [DONE]\n\n'
)


class Server(RawServer):
    """A tiny OpenAI-like server: /v1/models names `model_id`; completions stream `stream`."""

    def __init__(self, model_id: object, stream: bytes = GOOD_STREAM) -> None:
        self.stream = stream
        self.completions = 0
        super().__init__(models_body(model_id))

    async def completion(self, w: asyncio.StreamWriter) -> None:
        self.completions += 1
        w.write(self.stream)


@pytest.fixture
def server():
    started: list[Server] = []

    def start(model_id: object, stream: bytes = GOOD_STREAM) -> Server:
        started.append(Server(model_id, stream))
        return started[-1]

    yield start
    for s in started:
        s.stop()


def _bench(url: str, out: Path, *extra: str) -> list[str]:
    return ["bench", "--base-url", url, "--num-prompts", "2", "--num-workers", "1", "--random-input-len", "4",
            "--random-output-len", "2", "--request-timeout", "60", "--save-result", "--result-dir", str(out),
            *extra]  # fmt: skip


def _saved_inside(out: Path, tmp_path: Path) -> None:
    saved = [p for p in tmp_path.rglob("*.json") if ".requests" not in p.name]
    assert saved and all(p.parent == out for p in saved), f"results at {saved}, expected in {out}"
    for p in saved:
        assert json.loads(p.read_text())["completed"] == 2


LABELS = {
    "slash": "a/b",
    "dotdot": "../../escaped",
    "absolute": "/tmp/x",
    "long": "x" * 300,
    "dot": ".",
    "backslash": "a\\b",
    "spaces": "a b",
    "unicode": "ラベル",
}


@pytest.mark.parametrize("label", list(LABELS))
def test_odd_labels_are_saved_inside_the_result_dir(label, server, tmp_path):
    s = server("m")
    out = tmp_path / "out"
    r = hostile(*_bench(s.url, out, "--model", "m", "--label", LABELS[label]), codes=(0, 2), cwd=tmp_path)
    if r.code == 2:  # refused: before the benchmark, not after it
        assert s.completions == 0 and "--label" in r.err, r.err
        return
    _saved_inside(out, tmp_path)


MODEL_IDS = {
    "nul": "a\x00b",
    "integer": 123,
    "float": 1.5,
    "long": "m" * 300,
    "path": "org/model",
    "dotdot": "../../../escaped",
    "trailing-slash": "org/",
    "escape-sequence": "\x1b[31mred",
    "newline": "a\nb",
    "empty": "",
    "null": None,
    "list": ["m"],
}


@pytest.mark.parametrize("model", list(MODEL_IDS))
def test_odd_model_ids_from_the_server(model, server, tmp_path):
    """No --model: the id comes from the server's /v1/models, whatever it holds."""
    s = server(MODEL_IDS[model])
    out = tmp_path / "out"
    r = hostile(*_bench(s.url, out), codes=(0, 2), cwd=tmp_path)
    if r.code == 2:
        assert s.completions == 0 and "model" in r.err, r.err
        return
    _saved_inside(out, tmp_path)


DEEP = b"[" * 100_000 + b"]" * 100_000
STREAMS = {
    "deep-event": STREAM_HEAD + b"data: " + DEEP + b"\n\ndata: [DONE]\n\n",
    "deep-choices": STREAM_HEAD + b'data: {"choices": ' + DEEP + b"}\n\ndata: [DONE]\n\n",
    "deep-after-content": GOOD_STREAM.replace(b"data: [DONE]", b"data: " + DEEP + b"\n\ndata: [DONE]"),
    "deep-json-body": b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n"
    + DEEP,
}


@pytest.mark.parametrize("shape", list(STREAMS))
def test_deeply_nested_json_from_the_server(shape, server, tmp_path):
    """A server's event nested past the parser's recursion: failed requests with a reason (exit 1) and the
    result saved, not a crash; the ready check refuses the same stream in one line (exit 2)."""
    s = server("m", STREAMS[shape])
    out = tmp_path / "out"
    r = hostile(*_bench(s.url, out, "--model", "m"), codes=(2,), cwd=tmp_path)
    assert "initial test request" in r.err and s.completions == 1, r.err
    r = hostile(*_bench(s.url, out, "--model", "m", "--no-ready-check"), codes=(1,), cwd=tmp_path)
    assert "RecursionError" not in r.err + r.out, r.err
    [saved] = [p for p in out.glob("*.json") if ".requests" not in p.name]
    result = json.loads(saved.read_text())
    assert result["completed"] == 0 and result["failed"] == 2, result
    assert "nested too deeply" in json.dumps(result["failure_reasons"]), result["failure_reasons"]


FILENAMES = {
    "long": "r" * 250 + ".json",
    "missing-folder": "no/such/folder/r.json",
}


@pytest.mark.parametrize("name", list(FILENAMES))
def test_result_filenames_the_file_system_refuses_are_refused_before_the_load(name, server, tmp_path):
    s = server("m")
    args = _bench(s.url, tmp_path / "out", "--model", "m", "--result-filename", FILENAMES[name])
    r = hostile(*args, codes=(2,), names=["--result-filename"], cwd=tmp_path)
    assert s.completions == 0, r.err


def test_long_labels_keep_apart_in_file_names():
    """Two labels alike but for their ends: shortened names still differ (a digest of the whole)."""
    cfg = SimpleNamespace(label=None, backend="openai", max_concurrency=None, ramp_up_strategy=None,
                          request_rate=float("inf"))  # fmt: skip
    names = set()
    for end in "ab":
        cfg.label = "x" * 300 + end
        name = R.default_filename(cfg, "org/" + "m" * 300, "20260101-000000")
        assert len(name.encode()) <= R.NAME_MAX - R.NAME_RESERVE and "/" not in name, name
        names.add(name)
    assert len(names) == 2
