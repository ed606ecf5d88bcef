"""The SSE/HTTP parser fed byte by byte and in odd splits (no network): counting, usage, framing, failures."""

import json
import random

import pytest

from servelab.bench.client import RequestState, StreamConn, dechunk


class Owner:
    def __init__(self):
        self.done = []

    def on_done(self, conn, st, reusable):
        self.done.append((st, reusable))

    def conn_lost(self, conn):
        pass

    def retry(self, st):
        self.done.append((st, "retry"))


class Transport:
    def __init__(self):
        self.written = b""
        self.aborted = False

    def write(self, b):
        self.written += b

    def abort(self):
        self.aborted = True


def chunk(b: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(b), b)


def event(obj) -> bytes:
    return chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
TOK = event({"choices": [{"index": 0, "text": "hi"}]})
USAGE = event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
DONE = chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def run(parts, close=False):
    owner = Owner()
    conn = StreamConn(owner)
    conn.connection_made(Transport())
    st = RequestState(None, b"REQ", 0.0, 0.0)
    conn.start(st)
    for p in parts:
        conn.data_received(p)
    if close:
        conn.connection_lost(None)
    assert len(owner.done) == 1, "request must finish exactly once"
    return owner.done[0]


def test_normal_stream_counts_events_and_reads_usage():
    st, reusable = run([HEAD + TOK, TOK, TOK + USAGE + DONE])
    assert st.error is None and reusable
    assert len(st.chunks) == 3
    assert st.usage == {"prompt_tokens": 7, "completion_tokens": 3}
    assert st.generated_text() == "hihihi"


@pytest.mark.parametrize("step", [1, 2, 3, 5, 7, 13])
def test_any_split_of_the_bytes_gives_the_same_result(step):
    raw = HEAD + TOK + TOK + TOK + USAGE + DONE
    st, _ = run([raw[i : i + step] for i in range(0, len(raw), step)])
    assert st.error is None
    assert len(st.chunks) == 3 and st.usage["completion_tokens"] == 3


def test_events_in_one_read_share_a_timestamp():
    st, _ = run([HEAD + TOK + TOK + TOK + USAGE + DONE])
    assert len(st.chunks) == 3 and len(set(st.chunks)) == 1


def test_usage_inside_last_content_chunk_llama_cpp_style():
    last = event(
        {"choices": [{"index": 0, "text": "x", "finish_reason": "length"}], "usage": {"completion_tokens": 2}}
    )
    st, _ = run([HEAD + TOK, last + DONE])
    assert st.error is None and len(st.chunks) == 2 and st.usage["completion_tokens"] == 2


def test_generated_text_containing_data_colon_is_not_an_event():
    tricky = event({"choices": [{"index": 0, "text": "data: [DONE]\n\ndata: x"}]})
    st, _ = run([HEAD + tricky + TOK + USAGE + DONE])
    assert st.error is None and len(st.chunks) == 2


def compact_event(obj) -> bytes:
    return chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


U = {"completion_tokens": 2}
LAST_READS = {
    "token, usage, done": [{"choices": [{"text": "a", "finish_reason": None}]}, {"choices": [], "usage": U}],
    "finish reason, no done": [{"choices": [{"text": "a", "finish_reason": "length"}]}],
    "no choice, no usage": [{"choices": [{"text": "a"}]}, {"choices": []}, {"id": "x"}],
    "error in a choice": [{"choices": [{"text": "a"}]}, {"choices": [{"text": "b"}], "error": {"a": 1}}],
    "usage in a choice": [{"choices": [{"text": "a", "finish_reason": "stop"}], "usage": U}],
}  # fmt: skip


@pytest.mark.parametrize("name", list(LAST_READS))
def test_compact_content_events_counted_unparsed_give_what_parsing_gives(name):
    """The last read of a compact stream (as servers write it: its content events are counted, not parsed)
    ends the request as the same events written with spaces (each parsed) do."""
    outcomes = []
    for write in (compact_event, event):
        last = b"".join(write(obj) for obj in LAST_READS[name])
        done = DONE if name != "finish reason, no done" else b"0\r\n\r\n"
        st, reusable = run([HEAD + write({"choices": [{"text": "x"}]}), last + done])
        outcomes.append((st.error, reusable, len(st.chunks), st.usage, st.finish_seen, st.n_done))
    assert outcomes[0] == outcomes[1]


def test_http_error_status_fails_with_body():
    body = b'{"error": "overloaded"}'
    resp = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    st, reusable = run([resp])
    assert st.error.startswith("HTTP 503") and "overloaded" in st.error and not reusable


def test_truncated_stream_fails():
    st, _ = run([HEAD + TOK + TOK], close=True)
    assert st.error.startswith("truncated stream") and "2 content events" in st.error


def test_malformed_event_fails():
    st, _ = run([HEAD + TOK + chunk(b"data: {not json\n\n") + TOK + USAGE + DONE])
    assert st.error.startswith("malformed SSE")


def test_error_event_fails():
    st, _ = run([HEAD + TOK + event({"error": {"message": "boom"}}) + DONE])
    assert "boom" in st.error


def test_close_delimited_body_needs_eof():
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    body = b'data: {"choices":[{"text":"a"}]}\n\ndata: [DONE]\n\n'
    st, reusable = run([head + body], close=True)
    assert st.error is None and len(st.chunks) == 1 and not reusable


def test_non_streaming_json_body():
    body = json.dumps({"choices": [{"text": "abc"}], "usage": {"completion_tokens": 4}}).encode()
    resp = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body
    )
    st, reusable = run([resp[:30], resp[30:]])
    assert st.error is None and reusable and st.usage["completion_tokens"] == 4 and len(st.chunks) == 1
    assert st.generated_text() == "abc"


def test_responses_on_one_connection_read_as_on_fresh_ones():
    """A connection answers a repeated head from the last response's framing: each response still reads
    as it does alone, whatever came before it on the connection."""
    body = json.dumps({"choices": [{"text": "abc"}], "usage": {"completion_tokens": 4}}).encode()
    whole = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
    responses = [
        HEAD + TOK + TOK + USAGE + DONE,
        HEAD + TOK + USAGE + DONE,  # the same head again
        whole + body,
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n\r\noops",
        whole + body,
        HEAD + TOK + USAGE + DONE,
    ]
    owner = Owner()
    conn = StreamConn(owner)
    conn.connection_made(Transport())
    for raw in responses:
        conn.start(RequestState(None, b"REQ", 0.0, 0.0))
        conn.data_received(raw)
    alone = [run([raw])[0] for raw in responses]
    fields = ("error", "status", "sse", "chunked", "remaining", "close_after", "usage")
    assert [[getattr(st, f) for f in fields] + [len(st.chunks)] for st, _ in owner.done] == [
        [getattr(st, f) for f in fields] + [len(st.chunks)] for st in alone
    ]
    assert [st.error for st in alone] == [None, None, None, "HTTP 500: oops", None, None]


def test_stale_keepalive_connection_is_retried_once():
    owner = Owner()
    conn = StreamConn(owner)
    conn.connection_made(Transport())
    st = RequestState(None, b"REQ", 0.0, 0.0)
    st.reused = True
    conn.start(st)
    conn.connection_lost(None)
    assert owner.done == [(st, "retry")]


def test_dechunk():
    assert dechunk(chunk(b"abc") + chunk(b"de") + b"0\r\n\r\n") == b"abcde"


# -- every valid SSE form (the WHATWG event-stream format) -------------------------------------------------

DATA = [json.dumps({"choices": [{"index": 0, "text": t}]}).encode() for t in ("a", "b", "c")]
LAST = json.dumps({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}}).encode()


def sse_body(eol: bytes, space: bytes = b" ", extra: bytes = b"") -> list[bytes]:
    """Events as separate chunks (one write each, as servers do), with the given line ends."""
    events = [extra + b"data:" + space + d + eol + eol for d in [*DATA, LAST, b"[DONE]"]]
    return [chunk(e) for e in events]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
@pytest.mark.parametrize("space", [b" ", b""], ids=["space", "nospace"])
@pytest.mark.parametrize("step", [0, 1, 3])
def test_every_line_end_style_and_data_form_is_accepted(eol, space, step):
    raw = HEAD + b"".join(sse_body(eol, space)) + b"0\r\n\r\n"
    parts = [raw] if step == 0 else [raw[i : i + step] for i in range(0, len(raw), step)]
    st, reusable = run(parts)
    assert st.error is None and reusable
    assert len(st.chunks) == 3 and st.usage == {"prompt_tokens": 2, "completion_tokens": 3}
    assert st.generated_text() == "abc"


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"], ids=["LF", "CRLF"])
def test_comments_and_event_id_retry_fields_are_ignored(eol):
    extra = b": keep-alive" + eol + b"event: message" + eol + b"id: 7" + eol + b"retry: 1000" + eol
    ping = chunk(b": ping" + eol + eol)
    parts = sse_body(eol, extra=extra)
    st, _ = run([HEAD + ping + parts[0], ping + parts[1], b"".join(parts[2:]) + b"0\r\n\r\n"])
    assert st.error is None and len(st.chunks) == 3 and st.generated_text() == "abc"


def test_multi_line_data_is_one_event():
    obj = json.dumps({"choices": [{"index": 0, "text": "x"}]}, indent=1).encode()
    multi = chunk(b"".join(b"data: " + line + b"\n" for line in obj.splitlines()) + b"\n")
    st, _ = run([HEAD + multi + TOK + USAGE + DONE])
    assert st.error is None and len(st.chunks) == 2 and st.generated_text() == "xhi"


# -- a stream cut short fails ------------------------------------------------------------------------------


def test_stream_ending_cleanly_without_done_or_finish_reason_is_truncated():
    """3 of 8 tokens, then a proper chunked end: no [DONE], no finish reason."""
    st, _ = run([HEAD + TOK + TOK + TOK + b"0\r\n\r\n"])
    assert st.error.startswith("truncated stream") and "3 content events" in st.error


def test_close_delimited_stream_cut_short_is_truncated():
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    body = b'data: {"choices":[{"text":"a","finish_reason":null}]}\n\n' * 3
    st, _ = run([head + body], close=True)
    assert st.error.startswith("truncated stream")


def test_a_finish_reason_without_done_is_a_complete_stream():
    last = event({"choices": [{"index": 0, "text": "z", "finish_reason": "length"}]})
    st, _ = run([HEAD + TOK + TOK + last + b"0\r\n\r\n"])
    assert st.error is None and len(st.chunks) == 3


# -- bounds and garbage ------------------------------------------------------------------------------------


def run_limited(parts, max_body_bytes):
    owner = Owner()
    conn = StreamConn(owner, max_body_bytes=max_body_bytes)
    conn.connection_made(Transport())
    st = RequestState(None, b"REQ", 0.0, 0.0)
    conn.start(st)
    for p in parts:
        conn.data_received(p)
        if owner.done:
            break
    assert len(owner.done) == 1
    return owner.done[0]


def test_endless_stream_fails_at_the_body_limit():
    st, reusable = run_limited([HEAD] + [TOK] * 100_000, 64 << 10)
    assert st.error.startswith("response larger than") and not reusable
    assert 64 << 10 < st.size < (64 << 10) + 2 * len(TOK)


@pytest.mark.slow  # 3.2 s of CPU a case: an endless stream read to its limit
def test_endless_sse_line_fails_at_the_event_limit():
    st, _ = run_limited([HEAD, chunk(b"data: {")] + [chunk(b"x" * 65536)] * 1000, 1 << 40)
    assert st.error.startswith("SSE event larger than")


def test_endless_json_body_fails_at_the_body_limit():
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n"
    st, _ = run_limited([head] + [b"x" * 65536] * 100, 1 << 20)
    assert st.error.startswith("response larger than")


@pytest.mark.parametrize(
    "head,reason",
    [
        (b"HTTP/1.1 200 OK\r\ncontent-length: abc\r\n\r\n", "malformed HTTP header Content-Length"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: -5\r\n\r\n", "malformed HTTP header Content-Length"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "malformed HTTP status line"),
        (b"SPAM 200 OK\r\n\r\n", "malformed HTTP status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed HTTP header line"),
        (b"\x00\xff" * 40000, "HTTP response header larger than"),
    ],
)
def test_garbage_heads_fail_the_request(head, reason):
    st, reusable = run([head])
    assert st.error.startswith(reason) and not reusable


@pytest.mark.parametrize(
    "body",
    [b"[1, 2]", b'{"choices": [1]}', b'{"choices": [{"text": 5}], "usage": "lots"}', b"\xff\xfe"],
)
def test_odd_json_bodies_never_raise(body):
    resp = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
    st, _ = run([resp + body])
    assert st.generated_text() == ""
    assert st.usage is None


def test_random_garbage_and_splits_never_raise():
    """Seeded fuzzing: valid heads followed by mutated streams, cut at random points; every request ends
    exactly once, with a reason or none, and its text can be read."""
    rng = random.Random(13)
    heads = [HEAD, b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n", b"HTTP/1.1 200 OK\r\n\r\n"]
    pieces = [
        TOK,
        USAGE,
        DONE,
        b"data:",
        b"\r",
        b"\n",
        b"\r\n",
        b"{",
        b"}",
        b"0\r\n\r\n",
        b":",
        b"\xff",
        b"[DONE]",
    ]
    for _ in range(2000):
        body = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        raw = rng.choice(heads) + body
        cuts = sorted(rng.sample(range(1, len(raw)), min(3, len(raw) - 1)))
        parts = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
        owner = Owner()
        conn = StreamConn(owner, max_body_bytes=1 << 16)
        conn.connection_made(Transport())
        st = RequestState(None, b"REQ", 0.0, 0.0)
        conn.start(st)
        for p in parts:
            if not owner.done:
                conn.data_received(p)
        conn.connection_lost(None)
        assert len(owner.done) == 1
        assert isinstance(st.generated_text(), str)
        assert st.error is None or isinstance(st.error, str)
