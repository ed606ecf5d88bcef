"""A streaming OpenAI-compatible server with no model, for testing and benchmarking the load generator.

Cheap on purpose (it shares a 2-core machine with the client): raw asyncio Protocol, pre-built SSE chunks
(HTTP chunked framing included), one timer per token per stream at absolute times (start + k * delay, so
no drift). Token k (1-based) of a stream is sent at accept + first_token_delay + (k-1) * token_delay.

Misbehaviour on purpose (--mode, applied to every --fail-every-th request):
  ok          normal responses
  http500     HTTP 500 with a JSON error body
  truncate    stop after half the tokens and close the connection (no terminator, no [DONE])
  malformed   one event in the middle is `data: {not json` (then the stream continues normally)
  error-event an error event in the middle of the stream, then the stream ends
  hang        accept, send the headers, never send a token
  no-usage    a normal stream without the usage chunk
  burst       every token in one write when the last is due (a server whose API process was starved)
  die         the whole process exits (os._exit) halfway through the --die-after-requests-th request

GET /stats answers {"requests": N, "in_flight": N, "max_in_flight": N}: tests read from it how many requests
the client really had in flight at once, independent of timing. GET /metrics answers vLLM's prefix-cache
counters (vllm:prefix_cache_queries / _hits, in prompt words) of an unbounded prefix cache of 16-word blocks,
each block's key chained to the blocks before it as vLLM chains its block hashes; with --spec-decode K, also
vLLM's speculative-decoding counters (vllm:spec_decode_num_drafts, _num_draft_tokens, _num_accepted_tokens,
_num_accepted_tokens_per_pos{position}) of a drafter proposing K tokens a step, of which position p is
accepted on every (p+1)-th draft. POST /start_profile and /stop_profile answer 200. --log-requests FILE
appends each completion request (its X-Request-Id and JSON body) and profiler call to FILE as a JSON line, for
tests of what the client sends.

    python -m servelab.bench.mock_server --port 18000 --token-delay-ms 10 --output-tokens 128
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

MODES = ("ok", "http500", "truncate", "malformed", "error-event", "hang", "no-usage", "burst", "die")


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


class Settings:
    def __init__(self, a: argparse.Namespace) -> None:
        self.token_delay = a.token_delay_ms / 1000.0
        self.first_delay = (
            a.first_token_delay_ms if a.first_token_delay_ms is not None else a.token_delay_ms
        ) / 1000.0
        self.output_tokens = a.output_tokens
        self.mode = a.mode
        self.fail_every = max(1, a.fail_every)
        self.die_after = a.die_after_requests
        self.model = a.model
        self.spec_k = a.spec_decode
        self.log_path = a.log_requests
        created = int(time.time())
        # pre-built chunks: the same token text every time (" tok"), completions and chat forms
        self.tok_completion = _event(
            {
                "id": "cmpl-mock",
                "object": "text_completion",
                "created": created,
                "model": self.model,
                "choices": [{"index": 0, "text": " tok", "logprobs": None, "finish_reason": None}],
            }
        )
        self.tok_chat = _event(
            {
                "id": "chatcmpl-mock",
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model,
                "choices": [{"index": 0, "delta": {"content": " tok"}, "finish_reason": None}],
            }
        )
        self.role_chat = _event(
            {
                "id": "chatcmpl-mock",
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
            }
        )
        # the usage event, made per request from a template (json.dumps a request was a fifth of its parse)
        self.usage_completion = _usage_template("text_completion", self.model)
        self.usage_chat = _usage_template("chat.completion.chunk", self.model)
        self.done = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        self.sse_head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
        )
        self.sse_head_chat = self.sse_head + self.role_chat  # one write


def _usage_template(obj: str, model: str) -> bytes:
    """The usage event's data (as `_event` writes it) as a %-template of its three counts."""
    head = json.dumps({"id": "x", "object": obj, "model": model, "choices": []}, separators=(",", ":"))
    usage = ',"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}'
    return (head[:-1].replace("%", "%%") + usage).encode()


def _usage_event(template: bytes, prompt_tokens: int, completion_tokens: int) -> bytes:
    data = template % (prompt_tokens, completion_tokens, prompt_tokens + completion_tokens)
    return _chunk(b"data: " + data + b"\n\n")


def _json_response(status: str, obj: dict, close: bool = False) -> bytes:
    body = json.dumps(obj).encode()
    conn = b"close" if close else b"keep-alive"
    return (
        b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: %s\r\n\r\n"
        % (status.encode(), len(body), conn)
    ) + body


class _Stream:
    """One response stream: a single live timer, re-armed at absolute times start + first + k * delay."""

    __slots__ = ("bad_at", "final", "k", "last", "mode", "proto", "start", "tok")

    def __init__(
        self, proto, tok: bytes, final: bytes, last: int, mode: str, bad_at: int, start: float
    ) -> None:
        self.proto, self.tok, self.final, self.last = proto, tok, final, last
        self.mode, self.bad_at, self.start, self.k = mode, bad_at, start, 0

    def arm(self) -> None:
        s = self.proto.s
        when = self.start + s.first_delay + self.k * s.token_delay
        self.proto.handle_timer = self.proto.loop.call_at(when, self.fire)

    def fire(self) -> None:
        proto = self.proto
        if proto.transport is None:
            return
        self.k += 1
        if self.k < self.last:
            data = self.tok
            if self.k == self.bad_at:
                data += _chunk(b"data: {not json\n\n")
            proto.transport.write(data)
            self.arm()
            return
        if self.mode == "truncate":
            proto.transport.write(self.tok)
            proto.transport.close()
        elif self.mode == "die":
            MockProtocol._die()
        else:
            proto.end_request()
            proto.transport.write(self.tok + self.final)


PREFIX_BLOCK_WORDS = 16


class PrefixCache:
    """An unbounded prefix cache of the prompts seen: blocks of whole PREFIX_BLOCK_WORDS words, each keyed by
    its words and the key of the block before it; a prompt's hits are the words of its leading cached
    blocks."""

    def __init__(self) -> None:
        self.blocks: set[int] = set()
        self.queries = 0
        self.hits = 0

    def lookup(self, prompt: str) -> None:
        words = prompt.split()
        self.queries += len(words)
        key, cached = 0, True
        for k in range(0, len(words) - PREFIX_BLOCK_WORDS + 1, PREFIX_BLOCK_WORDS):
            key = hash((key, tuple(words[k : k + PREFIX_BLOCK_WORDS])))
            if cached and key in self.blocks:
                self.hits += PREFIX_BLOCK_WORDS
            else:
                cached = False
                self.blocks.add(key)

    def metrics(self, model: str, spec: SpecCounters | None = None) -> bytes:
        labels = f'{{engine="0",model_name="{model}"}}'
        lines = []
        for name, value in (("prefix_cache_queries", self.queries), ("prefix_cache_hits", self.hits)):
            lines += [f"# TYPE vllm:{name} counter", f"vllm:{name}_total{labels} {float(value)}"]
        if spec is not None:
            lines += spec.lines(labels)
        body = ("\n".join(lines) + "\n").encode()
        return (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: %d\r\n"
            b"connection: keep-alive\r\n\r\n" % len(body)
        ) + body


class SpecCounters:
    """vLLM's spec-decode counters of a drafter of K tokens a step: one draft per output token after the
    first; position p accepted on every (p+1)-th draft."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.drafts = 0
        self.accepted = [0] * k

    def add(self, output_tokens: int) -> None:
        for _ in range(max(0, output_tokens - 1)):
            self.drafts += 1
            for p in range(self.k):
                if self.drafts % (p + 1) == 0:
                    self.accepted[p] += 1

    def lines(self, labels: str) -> list[str]:
        out = ["# TYPE vllm:spec_decode_num_drafts counter"]
        out.append(f"vllm:spec_decode_num_drafts_total{labels} {float(self.drafts)}")
        out.append(f"vllm:spec_decode_num_draft_tokens_total{labels} {float(self.drafts * self.k)}")
        out.append(f"vllm:spec_decode_num_accepted_tokens_total{labels} {float(sum(self.accepted))}")
        for p, n in enumerate(self.accepted):
            pos = labels[:-1] + f',position="{p}"}}'
            out.append(f"vllm:spec_decode_num_accepted_tokens_per_pos_total{pos} {float(n)}")
        return out


class MockProtocol(asyncio.Protocol):
    count = 0  # requests seen by this process (all connections)
    cache = PrefixCache()
    in_flight = 0  # completion requests accepted and not yet answered in full
    spec: SpecCounters | None = None  # with --spec-decode
    max_in_flight = 0

    def __init__(self, s: Settings) -> None:
        self.s = s
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.handle_timer: asyncio.TimerHandle | None = None
        self.loop = asyncio.get_event_loop()
        self.active = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def send(self, data: bytes) -> None:
        """Write to the client; what is answered after it hung up goes nowhere."""
        if self.transport is not None:
            self.transport.write(data)

    def connection_lost(self, exc) -> None:
        if self.handle_timer is not None:
            self.handle_timer.cancel()
        self.end_request()
        self.transport = None

    def begin_request(self) -> None:
        self.active = True
        MockProtocol.in_flight += 1
        MockProtocol.max_in_flight = max(MockProtocol.max_in_flight, MockProtocol.in_flight)

    def end_request(self) -> None:
        if self.active:
            self.active = False
            MockProtocol.in_flight -= 1

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head = self.buf[:i]
            h = head.lower()
            j = h.find(b"content-length:")
            n = int(h[j + 15 : h.find(b"\r\n", j) if h.find(b"\r\n", j) > 0 else None]) if j >= 0 else 0
            if len(self.buf) < i + 4 + n:
                return
            body = self.buf[i + 4 : i + 4 + n]
            self.buf = self.buf[i + 4 + n :]
            self.handle(head, body)

    def handle(self, head: bytes, body: bytes) -> None:
        line = head.split(b"\r\n", 1)[0].split(b" ")
        path = line[1].decode() if len(line) > 1 else "/"
        if path.endswith("completions"):  # first: the requests a benchmark sends
            self.complete(head, path, body)
            return
        if path.endswith("/models"):
            self.send(
                _json_response(
                    "200 OK",
                    {
                        "object": "list",
                        "data": [{"id": self.s.model, "object": "model", "owned_by": "servelab-mock"}],
                    },
                )
            )
            return
        if path.endswith("/health"):
            self.send(_json_response("200 OK", {}))
            return
        if path.endswith("/stats"):
            stats = {"requests": MockProtocol.count, "in_flight": MockProtocol.in_flight}
            self.send(_json_response("200 OK", dict(stats, max_in_flight=MockProtocol.max_in_flight)))
            return
        if path.endswith("/metrics"):
            self.send(MockProtocol.cache.metrics(self.s.model, MockProtocol.spec))
            return
        if path.endswith(("/start_profile", "/stop_profile")):  # vLLM's profiler switches: logged, 200
            if self.s.log_path:
                _log_request(self.s.log_path, head, path, None)
            self.send(_json_response("200 OK", {}))
            return
        self.send(_json_response("404 Not Found", {"error": {"message": f"no route {path}"}}))

    def complete(self, head: bytes, path: str, body: bytes) -> None:
        """A completions or chat completions request: answered streamed or whole, as --mode says."""
        try:
            req = json.loads(body.decode())  # decoded here: json's own encoding detection costs more
        except (json.JSONDecodeError, UnicodeDecodeError):
            self.send(_json_response("400 Bad Request", {"error": {"message": "body is not JSON"}}))
            return
        MockProtocol.count += 1
        n_req = MockProtocol.count
        s = self.s
        chat = path.endswith("chat/completions")
        n_tokens = s.output_tokens or req.get("max_completion_tokens") or req.get("max_tokens") or 16
        if s.log_path:
            _log_request(s.log_path, head, path, req)
        if MockProtocol.spec is not None:
            MockProtocol.spec.add(n_tokens)
        prompt = (
            req.get("prompt") if not chat else " ".join(m.get("content", "") for m in req.get("messages", []))
        )
        prompt_tokens = len(str(prompt).split())
        MockProtocol.cache.lookup(str(prompt))
        misbehave = s.mode != "ok" and n_req % s.fail_every == 0
        mode = s.mode if misbehave else "ok"
        if s.die_after and n_req >= s.die_after:
            mode = "die"
        if mode == "http500":
            self.send(
                _json_response(
                    "500 Internal Server Error",
                    {"error": {"message": "mock failure on purpose", "code": 500}},
                )
            )
            return
        self.begin_request()
        if not req.get("stream"):
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": n_tokens,
                "total_tokens": prompt_tokens + n_tokens,
            }
            delay = s.first_delay + (n_tokens - 1) * s.token_delay
            text = " tok" * n_tokens
            choice = (
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                if chat
                else {"index": 0, "text": text, "finish_reason": "length"}
            )
            resp = _json_response(
                "200 OK",
                {
                    "id": "mock",
                    "object": "chat.completion" if chat else "text_completion",
                    "model": s.model,
                    "choices": [choice],
                    "usage": usage,
                },
            )
            self.handle_timer = self.loop.call_later(delay, self._write, resp)
            return
        include_usage = (req.get("stream_options") or {}).get("include_usage") and mode != "no-usage"
        self.send(s.sse_head_chat if chat else s.sse_head)
        if mode == "hang":
            return
        tok = s.tok_chat if chat else s.tok_completion
        last = n_tokens
        if mode in ("truncate", "error-event", "die"):
            last = max(1, n_tokens // 2)
        if mode == "error-event":
            final = _event({"error": {"message": "mock error event on purpose", "code": 500}}) + s.done
        else:
            template = s.usage_chat if chat else s.usage_completion
            use = _usage_event(template, prompt_tokens, n_tokens) if include_usage else b""
            final = use + s.done
        if mode == "burst":
            due = s.first_delay + (n_tokens - 1) * s.token_delay
            self.handle_timer = self.loop.call_later(due, self._write, tok * n_tokens + final)
            return
        bad_at = max(1, n_tokens // 2) if mode == "malformed" else 0
        stream = _Stream(self, tok, final, last, mode, bad_at, self.loop.time())
        stream.arm()

    def _write(self, data: bytes) -> None:
        self.end_request()
        if self.transport is not None:
            self.send(data)

    @staticmethod
    def _die() -> None:
        sys.stderr.write("mock server: dying on purpose\n")
        sys.stderr.flush()
        os._exit(3)


def _log_request(log_path: str, head: bytes, path: str, req: object) -> None:
    """One JSON line: the path, the X-Request-Id header (or null) and the body."""
    rid = None
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"x-request-id":
            rid = value.strip().decode()
    with open(log_path, "a") as f:
        f.write(json.dumps({"path": path, "request_id": rid, "body": req}) + "\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m servelab.bench.mock_server", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=18000)
    p.add_argument("--token-delay-ms", type=float, default=10.0, help="gap between tokens of one stream")
    p.add_argument("--first-token-delay-ms", type=float, default=None, help="default: the token delay")
    p.add_argument(
        "--output-tokens", type=int, default=0, help="tokens per response; 0 = the request's max_tokens"
    )
    p.add_argument("--mode", choices=MODES, default="ok")
    p.add_argument("--fail-every", type=int, default=1, help="misbehave on every N-th request only")
    p.add_argument("--die-after-requests", type=int, default=0, help="exit halfway through this request")
    p.add_argument("--model", default="mock-model")
    p.add_argument("--spec-decode", type=int, default=0, help="report spec-decode counters of K draft tokens")
    p.add_argument("--log-requests", default=None, help="append each completion request to this file")
    return p.parse_args(argv)


async def serve(a: argparse.Namespace) -> None:
    s = Settings(a)
    if s.spec_k > 0:
        MockProtocol.spec = SpecCounters(s.spec_k)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: MockProtocol(s), a.host, a.port, backlog=4096, reuse_address=True
    )
    print(f"mock server listening on http://{a.host}:{a.port} (mode {a.mode})", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    try:
        import uvloop  # noqa: PLC0415 (optional extra, not in the core install)

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(serve(a))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
