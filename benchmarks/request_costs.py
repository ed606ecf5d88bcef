"""CPU per request of what `servelab bench` and the mock do when a wave of requests turns over (issue 33): the
client's record (RecordWriter.request), the client's read of a stream's head, of one token and of its last
read (the usage event and [DONE]), and the mock's parse of one request (data_received to its first timer
armed), for the mock scenario of benchmarks/ttft_split.py (128 tokens, 32-word prompts, completions API).

Run once per source tree, alternated (best of 7 repeats each, CPU time, in microseconds):

    PYTHONPATH=/tmp/main-src python benchmarks/request_costs.py
    PYTHONPATH=src python benchmarks/request_costs.py
"""

from __future__ import annotations

import asyncio
import json
import time
import timeit

from servelab.bench import mock_server
from servelab.bench.client import RequestState, StreamConn
from servelab.bench.feed import WorkItem
from servelab.bench.records import RecordWriter

TOKENS = 128


def best_us(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=7, timer=time.process_time)) / number * 1e6


class Sink:
    """A transport or owner that takes everything and does nothing."""

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def on_done(self, *args: object) -> None:
        pass

    def conn_lost(self, *args: object) -> None:
        pass


def record_us() -> float:
    st = RequestState(WorkItem(7, b"x", 32), b"x", 1.0, 1.0)
    st.sent, st.end, st.sse = 1.001, 2.3, True
    st.chunks = [10_000 + 10_000 * k + (k * 7919) % 900 for k in range(TOKENS)]
    st.usage = {"prompt_tokens": 33, "completion_tokens": TOKENS, "total_tokens": 33 + TOKENS}
    writer = RecordWriter(open("/dev/null", "w", buffering=1 << 16), 0, False)  # noqa: SIM115
    writer.t0 = 0.5

    def one() -> None:
        writer.request(st)
        writer.flush()

    return best_us(one, 5000)


def client_reads_us() -> dict[str, float]:
    """The stream's bytes as the mock writes them, read by the client: head, one token, the last read."""
    s = mock_server.Settings(mock_server.parse_args([]))
    tok = s.tok_completion
    final = tok + mock_server._event(
        {"id": "x", "object": "text_completion", "model": s.model, "choices": [],
         "usage": {"prompt_tokens": 33, "completion_tokens": TOKENS, "total_tokens": 33 + TOKENS}}
    ) + s.done  # fmt: skip
    conn = StreamConn(Sink())
    conn.connection_made(Sink())

    def started() -> RequestState:
        st = RequestState(None, b"", 0.0, 0.0)
        st.sent = time.perf_counter()
        conn.closed = False
        conn.start(st)
        return st

    def head() -> None:
        started()
        conn.data_received(s.sse_head)

    def head_and_last() -> None:
        head()
        conn.data_received(final)

    head_us = best_us(head, 5000)
    head()
    return {
        "head": head_us,
        "one token": best_us(lambda: conn.data_received(tok), 5000),
        "last read": best_us(head_and_last, 5000) - head_us,
    }


def mock_parse_us() -> float:
    words = "the of and to in is was for on that with as by at from his her it an be are this which".split()
    body = json.dumps(
        {"model": "mock", "prompt": " ".join(words[i % len(words)] for i in range(32)), "max_tokens": TOKENS,
         "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.0}
    ).encode()  # fmt: skip
    request = (
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Type: application/json\r\n"
        b"X-Request-Id: d-12\r\nContent-Length: %d\r\n\r\n" % len(body)
    ) + body
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    proto = mock_server.MockProtocol(mock_server.Settings(mock_server.parse_args([])))
    proto.connection_made(Sink())

    def one() -> None:
        proto.data_received(request)
        proto.handle_timer.cancel()

    return best_us(one, 3000)


def main() -> None:
    costs = {"client record": record_us()}
    costs.update({f"client {k}": v for k, v in client_reads_us().items()})
    costs["mock parse"] = mock_parse_us()
    print(json.dumps({k: round(v, 2) for k, v in costs.items()}))


if __name__ == "__main__":
    main()
