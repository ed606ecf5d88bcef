"""A misbehaving OpenAI-compatible server for the bench tests: raw asyncio in a thread of the test process.

Every completions request gets the response of the server's mode (other paths get a model list):
  crlf      a valid stream with CRLF line ends and no space after `data:` (sse-starlette's framing)
  cut       3 of 8 tokens, then a clean close of a close-delimited stream: no finish reason, no [DONE]
  endless   tokens forever, as fast as the socket takes them
  slow      a valid stream, one token every 0.2 s
  bad-length  a JSON reply whose Content-Length is `abc`
  reset     the status line, then a TCP reset
  die       headers and 2 tokens of a chunked stream, then the connection closes mid-chunk
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading

MODES = ("crlf", "cut", "endless", "slow", "bad-length", "reset", "die")

TOKEN = json.dumps({"choices": [{"index": 0, "text": " tok", "finish_reason": None}]}).encode()
USAGE = json.dumps({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 8}}).encode()
MODELS = json.dumps({"object": "list", "data": [{"id": "hostile"}]}).encode()


def chunk(b: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(b), b)


class HostileServer:
    """Start with `HostileServer(mode)`; `url` to connect; `stop()` when done."""

    def __init__(self, mode: str) -> None:
        assert mode in MODES, mode
        self.mode = mode
        self.heads: list[bytes] = []  # every request head received, for tests of what the client sent
        self.loop = asyncio.new_event_loop()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(asyncio.start_server(self._client, sock=self.sock))
        self.loop.run_forever()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                if b"/models" in head.split(b"\r\n", 1)[0]:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                        % (len(MODELS), MODELS)
                    )
                    await writer.drain()
                    continue
                if not await getattr(self, "_" + self.mode.replace("-", "_"))(writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    # -- responses: each returns True when the connection can carry another request -------------------------
    async def _crlf(self, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        w.write(chunk(b": ping\r\n\r\n"))
        for d in [TOKEN] * 8 + [USAGE, b"[DONE]"]:
            w.write(chunk(b"event: message\r\ndata:" + d + b"\r\n\r\n"))
            await w.drain()
        w.write(b"0\r\n\r\n")
        return True

    async def _cut(self, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
        for _ in range(3):
            w.write(b"data: " + TOKEN + b"\n\n")
            await w.drain()
        return False

    async def _endless(self, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        block = chunk(b"data: " + TOKEN + b"\n\n") * 256
        while True:
            w.write(block)
            await w.drain()

    async def _slow(self, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for d in [TOKEN] * 3 + [USAGE, b"[DONE]"]:
            await asyncio.sleep(0.2)
            w.write(chunk(b"data: " + d + b"\n\n"))
            await w.drain()
        w.write(b"0\r\n\r\n")
        return True

    async def _bad_length(self, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: abc\r\n\r\n{}")
        return False

    async def _reset(self, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\n")
        await w.drain()
        sock = w.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
        w.transport.abort()
        return False

    async def _die(self, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        w.write(chunk(b"data: " + TOKEN + b"\n\n") * 2 + b"40\r\ndata: {")
        await w.drain()
        return False
