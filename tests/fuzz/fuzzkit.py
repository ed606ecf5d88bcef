"""The fuzz suite's harness: run the real CLI in-process (its `main()`, with its one error path), check every
hostile input the same way, and count the inputs (conftest.py prints the count at the end of the session).

`hostile(...)` asserts what the suite promises for each input: no traceback, no internal error, an exit code
among the documented ones, a message naming the problem, and the files named untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import socket
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from clirun import Captured, environment

from servelab.cli import main as cli_main

TRACEBACK = "Traceback (most recent call last)"
COUNTS = {"tried": 0}


@dataclass
class Outcome:
    code: int
    out: str
    err: str


@contextlib.contextmanager
def patched_env(env: dict[str, str] | None, cwd: Path | None) -> Iterator[None]:
    """The environment with `env` added (COLUMNS 200 unless set) and the working directory `cwd`, both put
    back after (clirun.environment)."""
    with environment({"COLUMNS": "200", **os.environ, **(env or {})}, cwd):
        yield


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Outcome:
    """`servelab ARGS` through `servelab.cli.main.main`, as the console script runs it."""
    out, err = Captured(), Captured()
    code: int | str | None = 0
    with patched_env(env, cwd):
        old = sys.argv, sys.stdout, sys.stderr
        sys.argv, sys.stdout, sys.stderr = ["servelab", *args], out, err
        try:
            cli_main.main()
        except SystemExit as e:
            code = e.code
        finally:
            sys.argv, sys.stdout, sys.stderr = old
    if code is None:
        code = 0
    assert isinstance(code, int), f"exit code {code!r} is not a number"
    return Outcome(code, out.text(), err.text())


def digest(paths: Iterable[Path]) -> dict[str, str]:
    """Every file under the paths (files or directories) with a hash of its bytes: what 'untouched' means."""
    found: dict[str, str] = {}
    for p in paths:
        for f in [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file()):
            found[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return found


def hostile(
    *args: str,
    codes: Iterable[int] = (2,),
    names: Iterable[str] = (),
    keep: Iterable[Path] = (),
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Outcome:
    """Run one hostile input and assert the promises: no traceback, no internal error, an expected exit code,
    an error that names each of `names` (a flag, field or file), the files under `keep` untouched."""
    COUNTS["tried"] += 1
    keep = list(keep)
    before = digest(keep)
    r = run_cli(*args, env=env, cwd=cwd)
    shown = f"servelab {' '.join(map(repr, args))} -> {r.code}\nstderr: {r.err[-2000:]}"
    assert TRACEBACK not in r.err and TRACEBACK not in r.out, shown
    assert "internal error" not in r.err, shown
    assert r.code in tuple(codes), shown
    if r.code == 2:
        assert "error" in r.err.lower(), shown
        for name in names:
            assert name in r.err, f"the error does not name {name!r}: {shown}"
    assert digest(keep) == before, f"files changed or lost: {shown}"
    return r


def pending(reason: str):
    """An input that fails today in code another helper is fixing: strict, so it shows when it is fixed."""
    return pytest.mark.xfail(strict=True, reason=reason)


def tried(n: int = 1) -> None:
    """Count hostile inputs a test tries without the CLI (a redaction rule over a corpus, a store's rows)."""
    COUNTS["tried"] += n


def tiny_workload(path: Path, **extra) -> Path:
    """A perf-eval workload file of one small bench point (model `m`), for commands that take one."""
    config = {"name": "s", "input_len": 8, "output_len": 2, "num_prompts": 2, "max_concurrency": 1}
    data = {"name": "w", "gpu": "H200", "vllm": {"model": "m"}, "vllm_bench": {"configs": [config]}} | extra
    path.write_text(json.dumps(data))
    return path


def models_body(model_id: object) -> bytes:
    """The body of /v1/models naming one model."""
    return json.dumps({"object": "list", "data": [{"id": model_id}]}).encode()


class RawServer:
    """A raw asyncio HTTP server in a daemon thread of the test process, on a free local port: each
    connection's request is read whole, /v1/models answers `models`, and `completion` writes whatever the
    test wants a completion request to get before the connection closes."""

    def __init__(self, models: bytes) -> None:
        self.models = models
        self.loop = asyncio.new_event_loop()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        # listening before the constructor returns: a stop() during start-up would break the loop's start
        self.listening = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()
        self.listening.wait(30)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(asyncio.start_server(self._client, sock=self.sock))
        self.listening.set()
        self.loop.run_forever()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)

    async def completion(self, w: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _client(self, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lengths = (
                int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")
            )
            await reader.readexactly(next(lengths, 0))
            if b"/models" in head.split(b"\r\n", 1)[0]:
                w.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                        % (len(self.models), self.models))  # fmt: skip
            else:
                await self.completion(w)
            await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            w.close()
