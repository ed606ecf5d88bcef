"""The streaming HTTP/1.1 client: an asyncio Protocol per connection, driven by callbacks (no task per
request).

Hot path (data_received of a 200 text/event-stream response), per socket read:
  one perf_counter() read; bytes.rfind of the last event end; bytes.count of data lines and of JSON-object
  ends (patterns of the stream's line ends, sse.py); three `in` tests. Content events are counted, never
  parsed, when every data line is one JSON object ending its event; reads holding anything else (the usage,
  [DONE] or error events, multi-line data, a malformed event) are parsed (sse.event_data), each event
  exactly but plain content events (sse.plain_content), which are counted as here. Events that
  arrive in one read share a timestamp (their ITL gaps are 0), as with any client that reads the socket.
Framing: chunked transfer (the usual), Content-Length, or close-delimited bodies. The SSE patterns are matched
on the raw chunked bytes, which assumes chunk boundaries between lines (each event written at once, as
servers do). The raw body is kept as a list of the read buffers (cheap) so text can be extracted after the
request when it is needed.
Bounds: a response holds at most `max_body_bytes` (the run's --max-response-mib) and an SSE event at most
MAX_EVENT_BYTES; a response over either fails, so an endless or garbage stream cannot exhaust memory.
A stream succeeds only when it ends with [DONE] or a finish reason: one cut short is a failure.
Failures never raise into the loop: each ends the request with a reason (HTTP status, truncated, oversized or
malformed stream or header, error event, timeout, connection errors).
"""

from __future__ import annotations

import asyncio
import json
from time import perf_counter

from servelab.bench import sse
from servelab.readable import typed

_TERMINATOR = b"\r\n0\r\n\r\n"
MAX_HEAD_BYTES = 64 << 10
MAX_EVENT_BYTES = 16 << 20  # one SSE event (a first chunk with prompt logprobs can be megabytes)
MAX_BODY_BYTES = 64 << 20  # the default of --max-response-mib


class RequestState:
    """One in-flight request: what was sent, when, and what came back (raw timestamps)."""

    __slots__ = (
        "chunked",
        "chunks",
        "close_after",
        "conn",
        "end",
        "error",
        "event_error",
        "finished",
        "got_bytes",
        "finish_seen",
        "head",
        "in_body",
        "item",
        "n_bad",
        "n_done",
        "new_conn",
        "parts",
        "payload",
        "remaining",
        "retried",
        "reused",
        "sched",
        "sent",
        "size",
        "slot",
        "sse",
        "status",
        "style",
        "tail",
        "usage",
    )

    def __init__(self, item, payload: bytes, sched: float, slot: float) -> None:
        self.item = item
        self.payload = payload
        self.sched = sched
        self.slot = slot
        self.sent = 0.0
        self.end = 0.0
        self.chunks: list[int] = []
        self.n_bad = 0  # events whose data is neither a JSON object nor [DONE]
        self.n_done = 0
        self.finish_seen = False
        self.size = 0
        self.style: sse.LineStyle | None = None
        self.usage: dict | None = None
        self.error: str | None = None
        self.event_error: str | None = None
        self.parts: list[bytes] = []
        self.tail = b"\n"
        self.head = b""
        self.status = 0
        self.in_body = False
        self.sse = False
        self.chunked = False
        self.remaining = -1
        self.close_after = False
        self.got_bytes = False
        self.reused = False
        self.retried = False
        self.new_conn = False
        self.finished = False
        self.conn: StreamConn | None = None

    def body_bytes(self) -> bytes:
        raw = b"".join(self.parts)
        return dechunk(raw) if self.chunked else raw

    def generated_text(self) -> str:
        """Text of the completion, parsed after the request (never in the hot path)."""
        body = self.body_bytes()
        if not self.sse:
            return _choice_text(_json_object(body), "message")
        return "".join(_choice_text(_json_object(data), "delta") for data in sse.event_data(body))

    def leading_events_without_text(self) -> int:
        """How many content events (an event with a choice, as the hot path counts them) come before the
        first whose choice carries text: completion text, chat content, reasoning or a tool call. Parsed
        after the request (--ttft-at first-content), never in the hot path."""
        n = 0
        for data in sse.event_data(self.body_bytes()):
            obj = _json_object(data)
            if obj.get("error") or not obj.get("choices"):
                continue  # the usage event, [DONE], an error: not content events
            if _has_text(obj):
                return n
            n += 1
        return n


def _json_object(data: bytes) -> dict:
    try:
        obj = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deeply
        return {}
    return obj if isinstance(obj, dict) else {}


def _choice_text(obj: dict, message_key: str) -> str:
    """The first choice's text: `text` (completions) or `<message_key>.content` (chat); '' when absent or
    not text."""
    choices = obj.get("choices")
    c = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(c, dict):
        return ""
    message = c.get(message_key)
    text = c.get("text") or (message.get("content") if isinstance(message, dict) else None)
    return text if isinstance(text, str) else ""


# what a streamed chat delta may carry that is generated output (vLLM and SGLang name reasoning either way)
DELTA_OUTPUT = ("content", "reasoning_content", "reasoning", "tool_calls")


def _has_text(obj: dict) -> bool:
    """Whether an event's first choice carries generated output: completion text, or a chat delta's content,
    reasoning or tool call."""
    c = obj["choices"][0] if isinstance(obj["choices"], list) else None
    if not isinstance(c, dict):
        return False
    delta = c.get("delta")
    return bool(c.get("text")) or (isinstance(delta, dict) and any(delta.get(k) for k in DELTA_OUTPUT))


def dechunk(raw: bytes) -> bytes:
    """Decode an HTTP chunked body (used after the request, for text and JSON bodies)."""
    out, pos = [], 0
    while True:
        eol = raw.find(b"\r\n", pos)
        if eol < 0:
            break
        try:
            size = int(raw[pos:eol].split(b";")[0], 16)
        except ValueError:
            break
        if size == 0:
            break
        out.append(raw[eol + 2 : eol + 2 + size])
        pos = eol + 2 + size + 2
    return b"".join(out)


class StreamConn(asyncio.Protocol):
    """One keep-alive connection; carries at most one request at a time. `owner` is the Worker."""

    def __init__(self, owner, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.owner = owner
        self.max_body_bytes = max_body_bytes
        self.transport: asyncio.Transport | None = None
        self.st: RequestState | None = None
        self.closed = False
        # the last response's head and what it set: a server without a date header repeats its head byte for
        # byte (the mock does), and parsing it was a fifth of a stream's head and last read (issue 33)
        self.last_head = b""
        self.last_framing: tuple[int, bool, bool, bool, int] | None = None

    # -- asyncio callbacks -------------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        t = perf_counter()
        st = self.st
        if st is None:  # bytes on an idle connection: the stream is out of sync, drop the connection
            self._drop()
            return
        st.got_bytes = True
        if not st.in_body:
            st.head += data
            i = st.head.find(b"\r\n\r\n")
            if i < 0:
                if len(st.head) > MAX_HEAD_BYTES:
                    self.finish(t, f"HTTP response header larger than {MAX_HEAD_BYTES >> 10} KiB")
                return
            head, data = st.head[:i], st.head[i + 4 :]
            st.head = b""
            error = self._read_head(st, head)
            if error:
                self.finish(t, error)
                return
            if st.remaining == 0:
                self.finish(t, None)
                return
            if not data:
                return
        st.parts.append(data)
        st.size += len(data)
        if st.size > self.max_body_bytes:
            self.finish(
                t,
                f"response larger than {typed(self.max_body_bytes / (1 << 20))} MiB (--max-response-mib)",
            )
            return
        if st.sse:
            buf = st.tail + data
            style = st.style
            if style is None:
                style = st.style = sse.line_style(buf)
            if style is not None and (end := buf.rfind(style.event_end)) >= 0:
                event_end, json_end, data_start, cr_data_start = style
                cut = end + len(event_end)
                complete = buf[:cut]
                st.tail = buf[cut - 1 :]  # the last line end, so a data line right after it is counted
                n = complete.count(data_start)
                if cr_data_start:
                    n += complete.count(cr_data_start)
                if n:
                    if (
                        n != complete.count(json_end)
                        or b'"usage"' in complete
                        or b"[DONE]" in complete
                        or b'"error"' in complete
                    ):
                        n = self._parse_events(st, complete)
                    if n > 0:
                        us = int((t - st.sent) * 1e6)
                        if n == 1:
                            st.chunks.append(us)
                        else:
                            st.chunks.extend([us] * n)
            else:
                st.tail = buf
                if len(buf) > MAX_EVENT_BYTES:
                    self.finish(t, f"SSE event larger than {MAX_EVENT_BYTES >> 20} MiB")
                    return
            if st.chunked:
                if buf.endswith(_TERMINATOR) or buf == b"\n0\r\n\r\n":
                    self.finish(t, None)
                    return
        elif st.chunked:
            tail = st.tail + data
            st.tail = tail[-7:]
            if tail.endswith(_TERMINATOR) or tail == b"\n0\r\n\r\n":
                self.finish(t, None)
                return
        if st.remaining > 0:
            st.remaining -= len(data)
            if st.remaining <= 0:
                self.finish(t, None)

    def connection_lost(self, exc) -> None:
        self.closed = True
        st = self.st
        self.owner.conn_lost(self)
        if st is None or st.finished:
            return
        t = perf_counter()
        if not st.got_bytes and st.reused and not st.retried:
            # the server closed an idle keep-alive connection as we wrote: retry once on a new connection
            self.st = None
            self.owner.retry(st)
            return
        if st.in_body and st.remaining < 0 and not st.chunked:
            self.finish(t, None)  # close-delimited body: EOF is its end
            return
        if exc is not None:
            reason = f"connection error: {type(exc).__name__}: {exc}"
        elif not st.got_bytes:
            reason = "connection closed by server before any response"
        else:
            reason = f"truncated stream: connection closed after {len(st.chunks)} content events"
        self.finish(t, reason)

    # -- used by the worker --------------------------------------------------------------------------------
    def start(self, st: RequestState) -> None:
        """Send a request on this connection (the worker starts requests on connected ones only)."""
        if self.transport is None:
            raise RuntimeError("a request started on a connection that is not connected")
        self.st = st
        st.conn = self
        self.transport.write(st.payload)

    def timeout(self, t: float, limit_s: float) -> None:
        events = len(self.st.chunks) if self.st is not None else 0
        self.finish(
            t,
            f"timeout: no complete response after {typed(limit_s)} s ({events} content events)",
        )

    def finish(self, t: float, error: str | None) -> None:
        st = self.st
        if st is None or st.finished:
            return
        st.finished = True
        st.end = t
        self.st = None
        if error is None:
            error = _verdict(st)
        st.error = error
        reusable = error is None and not st.close_after and not self.closed
        if not reusable:
            self._drop()
        self.owner.on_done(self, st, reusable)

    def close(self) -> None:
        """Close the connection (its requests have all ended)."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # -- helpers ---------------------------------------------------------------------------------------------
    def _drop(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _read_head(self, st: RequestState, head: bytes) -> str | None:
        """_parse_head, or the last response's framing when its head was the same bytes."""
        if head == self.last_head and self.last_framing is not None:
            st.status, st.chunked, st.close_after, st.sse, st.remaining = self.last_framing
            st.in_body = True
            return None
        error = _parse_head(st, head)
        if error is None:
            self.last_head = head
            self.last_framing = (st.status, st.chunked, st.close_after, st.sse, st.remaining)
        return error

    @staticmethod
    def _parse_events(st: RequestState, complete: bytes) -> int:
        """Parse complete events: note [DONE], usage, errors, finish reasons and malformed events; return how
        many are content events (a choice with text or a role). An event that is one JSON object with a
        choice (`"choices":[{`, compact, as servers write it) and neither usage nor an error is counted
        without being parsed, as the hot path counts it (the last read of a stream holds one beside the usage
        event; parsing it was a third of a request's parsing, issue 33); any other event is parsed exactly."""
        content = 0
        for data in sse.event_data(complete):
            if data == b"[DONE]":
                st.n_done += 1
                continue
            if sse.plain_content(data):
                content += 1
                if sse.FINISH_REASON.search(data):
                    st.finish_seen = True
                continue
            try:
                obj = json.loads(data)
            except (json.JSONDecodeError, UnicodeDecodeError):
                obj = None
            except RecursionError:  # a server's event nested past the parser: a failed request, not a crash
                st.event_error = f"SSE event nested too deeply to parse ({len(data)} bytes)"
                continue
            if not isinstance(obj, dict):
                st.n_bad += 1
                continue
            if obj.get("error"):
                err = obj["error"]
                msg = err.get("message", err) if isinstance(err, dict) else err
                st.event_error = f"error event in stream: {str(msg)[:200]}"
                continue
            if obj.get("usage"):
                st.usage = _usage(obj["usage"])
            if obj.get("choices"):
                content += 1
                if sse.FINISH_REASON.search(data):
                    st.finish_seen = True
        return content


def _parse_head(st: RequestState, head: bytes) -> str | None:
    """Read the status and the framing headers into `st`; return why the head is malformed, or None."""
    lines = head.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
        return f"malformed HTTP status line: {lines[0][:80]!r}"
    st.status = int(code)
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name.strip():
            return f"malformed HTTP header line: {line[:80]!r}"
        headers[name.strip().lower()] = value.strip().lower()
    connection = headers.get(b"connection", b"")
    st.chunked = b"chunked" in headers.get(b"transfer-encoding", b"")
    st.close_after = b"close" in connection or (version == b"HTTP/1.0" and b"keep-alive" not in connection)
    st.sse = st.status == 200 and headers.get(b"content-type", b"").startswith(b"text/event-stream")
    length = headers.get(b"content-length")
    if length is not None and not st.chunked:
        if not length.isdigit():
            return f"malformed HTTP header Content-Length: {length[:40]!r}"
        st.remaining = int(length)
    st.in_body = True
    return None


def _verdict(st: RequestState) -> str | None:
    """Why a response that ended at the HTTP level is still a failure, or None."""
    if st.status != 200:
        body = st.body_bytes()[:200].decode("utf-8", "replace").strip()
        return f"HTTP {st.status}: {body}" if body else f"HTTP {st.status}"
    if st.event_error:
        return st.event_error
    if st.sse:
        if st.n_bad:
            return f"malformed SSE: {st.n_bad} events are neither JSON objects nor [DONE]"
        if b"data:" in st.tail:
            return "truncated stream: an incomplete SSE event at the end of the body"
        if not st.chunks:
            return "no content event received (cannot measure TTFT)"
        if not st.n_done and not st.finish_seen and not sse.FINISH_REASON.search(st.body_bytes()):
            return f"truncated stream: {len(st.chunks)} content events, then no [DONE] and no finish reason"
        return None
    # non-streaming JSON response: one parse, after the request
    try:
        obj = json.loads(st.body_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "malformed JSON response body"
    except RecursionError:
        return "JSON response body nested too deeply to parse"
    if not isinstance(obj, dict) or not obj.get("choices"):
        return "response has no choices"
    st.usage = _usage(obj.get("usage"))
    st.chunks.append(int((st.end - st.sent) * 1e6))
    return None


def _usage(value) -> dict | None:
    """The token counts of a usage object; counts that are not non-negative integers are dropped (a server's
    bad usage must not become the result's token count)."""
    if not isinstance(value, dict):
        return None
    counts = {k: v for k, v in value.items() if type(v) is int and v >= 0}
    return counts or None
