"""The streaming HTTP/1.1 client: an asyncio Protocol per connection, driven by callbacks (no task per
request).

Hot path (data_received of a 200 text/event-stream response), per socket read:
  one perf_counter() read; bytes.rfind of the last event end; bytes.count of complete events ("\\ndata:")
  and of JSON-object ends ("}\\n\\n"); three `in` tests that route only the usage / [DONE] / error events
  to json.loads. Content events are counted, never parsed. Events that arrive in one read share a timestamp
  (their ITL gaps are 0), as with any client that reads the socket.
Framing: chunked transfer (the usual), Content-Length, or close-delimited bodies. The raw body is kept as a
list of the read buffers (cheap) so text can be extracted after the request when it is needed.
Failures never raise into the loop: each ends the request with a reason (HTTP status, truncated or malformed
stream, error event, timeout, connection errors).
"""

from __future__ import annotations

import asyncio
import json
from time import perf_counter

_TERMINATOR = b"\r\n0\r\n\r\n"


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
        "head",
        "in_body",
        "item",
        "n_done",
        "n_events",
        "n_json",
        "new_conn",
        "parts",
        "payload",
        "remaining",
        "retried",
        "reused",
        "sched",
        "sent",
        "slot",
        "sse",
        "status",
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
        self.n_events = 0
        self.n_json = 0
        self.n_done = 0
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
        self.conn = None

    def body_bytes(self) -> bytes:
        raw = b"".join(self.parts)
        return dechunk(raw) if self.chunked else raw

    def generated_text(self) -> str:
        """Text of the completion, parsed after the request (never in the hot path)."""
        body = self.body_bytes()
        if not self.sse:
            try:
                choices = json.loads(body).get("choices") or [{}]
            except (json.JSONDecodeError, AttributeError):
                return ""
            c = choices[0]
            return c.get("text") or (c.get("message") or {}).get("content") or ""
        out = []
        for event in body.split(b"\n\n"):
            j = event.find(b"data:")
            if j < 0:
                continue
            data = event[j + 5 :].strip()
            if not data.startswith(b"{"):
                continue
            try:
                choices = json.loads(data).get("choices")
            except json.JSONDecodeError:
                continue
            if choices:
                c = choices[0]
                out.append(c.get("text") or (c.get("delta") or {}).get("content") or "")
        return "".join(out)


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

    def __init__(self, owner) -> None:
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.st: RequestState | None = None
        self.closed = False

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
                if len(st.head) > 65536:
                    self.finish(t, "HTTP response header larger than 64 KiB")
                return
            head, data = st.head[:i], st.head[i + 4 :]
            st.head = b""
            if not self._parse_head(st, head):
                self.finish(t, f"malformed HTTP status line: {head[:80]!r}")
                return
            if st.remaining == 0:
                self.finish(t, None)
                return
            if not data:
                return
        st.parts.append(data)
        if st.sse:
            buf = st.tail + data
            end = buf.rfind(b"\n\n")
            if end >= 0:
                complete = buf[: end + 2]
                st.tail = buf[end + 1 :]
                n = complete.count(b"\ndata:")
                if n:
                    st.n_events += n
                    st.n_json += complete.count(b"}\n\n")
                    if b'"usage"' in complete or b"[DONE]" in complete or b'"error"' in complete:
                        n -= self._inspect(st, complete)
                    if n > 0:
                        us = int((t - st.sent) * 1e6)
                        if n == 1:
                            st.chunks.append(us)
                        else:
                            st.chunks.extend([us] * n)
            else:
                st.tail = buf
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
        self.st = st
        st.conn = self
        self.transport.write(st.payload)

    def timeout(self, t: float, limit_s: float) -> None:
        self.finish(
            t, f"timeout: no complete response after {limit_s:g} s ({len(self.st.chunks)} content events)"
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

    # -- helpers ---------------------------------------------------------------------------------------------
    def _drop(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    @staticmethod
    def _parse_head(st: RequestState, head: bytes) -> bool:
        try:
            st.status = int(head[9:12])
        except ValueError:
            return False
        h = head.lower()
        st.chunked = b"transfer-encoding: chunked" in h
        st.close_after = b"connection: close" in h
        st.sse = st.status == 200 and b"text/event-stream" in h
        if not st.chunked:
            i = h.find(b"content-length:")
            if i >= 0:
                st.remaining = int(h[i + 15 : h.find(b"\r\n", i) if h.find(b"\r\n", i) > 0 else None])
        st.in_body = True
        return True

    @staticmethod
    def _inspect(st: RequestState, complete: bytes) -> int:
        """Parse only the events that may carry usage, [DONE] or an error; return how many are not content."""
        non_content = 0
        for event in complete.split(b"\n\n"):
            j = event.find(b"data:")
            if j < 0:
                continue
            data = event[j + 5 :].strip()
            if data == b"[DONE]":
                st.n_done += 1
                non_content += 1
                continue
            if b'"usage"' not in data and b'"error"' not in data:
                continue
            try:
                obj = json.loads(data)
            except json.JSONDecodeError:
                continue  # counted as malformed by the n_json check
            if not isinstance(obj, dict):
                continue
            if obj.get("error"):
                err = obj["error"]
                msg = err.get("message", err) if isinstance(err, dict) else err
                st.event_error = f"error event in stream: {str(msg)[:200]}"
                non_content += 1
                continue
            if obj.get("usage"):
                st.usage = obj["usage"]
            if not obj.get("choices"):
                non_content += 1
        return non_content


def _verdict(st: RequestState) -> str | None:
    """Why a response that ended at the HTTP level is still a failure, or None."""
    if st.status != 200:
        body = st.body_bytes()[:200].decode("utf-8", "replace").strip()
        return f"HTTP {st.status}: {body}" if body else f"HTTP {st.status}"
    if st.event_error:
        return st.event_error
    if st.sse:
        if st.n_events != st.n_json + st.n_done:
            bad = st.n_events - st.n_json - st.n_done
            return f"malformed SSE: {bad} of {st.n_events} events are not JSON objects"
        if b"data:" in st.tail:
            return "truncated stream: an incomplete SSE event at the end of the body"
        if not st.chunks:
            return "no content event received (cannot measure TTFT)"
        return None
    # non-streaming JSON response: one parse, after the request
    try:
        obj = json.loads(st.body_bytes())
    except json.JSONDecodeError:
        return "malformed JSON response body"
    if not isinstance(obj, dict) or not obj.get("choices"):
        return "response has no choices"
    st.usage = obj.get("usage") or None
    st.chunks.append(int((st.end - st.sent) * 1e6))
    return None
