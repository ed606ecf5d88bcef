"""Server-sent events as OpenAI-compatible servers stream them (the WHATWG event-stream format).

Lines end in LF, CRLF or CR (sse-starlette, used by many servers, writes CRLF); a blank line ends an event;
`data:` fields (one optional space after the colon) are joined with LF; comments (lines starting with `:`)
and the other fields (`event:`, `id:`, `retry:`) carry nothing a benchmark needs.

Two readers: `LineStyle` gives the client's hot path the byte patterns of one stream's line ends, so it can
count events without parsing them; `event_data` splits a block of complete events (the slow path, and the
text of a finished response), where `plain_content` tells the content events that need no parse.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

# a non-null finish reason ("finish_reason": "stop"), the sign of a completed choice
FINISH_REASON = re.compile(rb'"finish_reason"\s*:\s*"')


class LineStyle(NamedTuple):
    """The byte patterns of one line-end style, as the hot path counts them."""

    event_end: bytes  # the blank line that ends an event
    json_end: bytes  # a JSON object's data line ending its event
    data_start: bytes  # a line end followed by a data field (also after a chunk header, which ends in CRLF)
    cr_data_start: bytes  # CR style only: a data line after another line of the same chunk


LF = LineStyle(b"\n\n", b"}\n\n", b"\ndata:", b"")
CRLF = LineStyle(b"\r\n\r\n", b"}\r\n\r\n", b"\ndata:", b"")
CR = LineStyle(b"\r\r", b"}\r\r", b"\ndata:", b"\rdata:")


def plain_content(data: bytes) -> bool:
    """Whether an event's data reads as a content event without parsing: one JSON object (braces at both
    ends, as the hot path takes it) with a non-empty `choices` list written compactly, and no usage or error
    key, whose values the client must read. Text cannot form these patterns (its quotes are escaped); a nested
    object's `choices` key could, which no server writes."""
    return (
        data[:1] == b"{"
        and data[-1:] == b"}"
        and b'"choices":[{' in data
        and b'"usage"' not in data
        and b'"error"' not in data
    )


def line_style(buf: bytes) -> LineStyle | None:
    """The style of the first data line's end, or None while no data line has ended yet."""
    j = buf.find(b"data:")
    if j < 0:
        return None
    i_n, i_r = buf.find(b"\n", j), buf.find(b"\r", j)
    if i_r < 0:
        return LF if i_n >= 0 else None
    if 0 <= i_n < i_r:
        return LF
    if i_r + 1 == len(buf):
        return None  # CR at the end of what arrived: CRLF or CR, the next byte says
    return CRLF if buf[i_r + 1] == 0x0A else CR


def event_data(block: bytes) -> Iterator[bytes]:
    """The data of each complete event in `block` (events without data are skipped). Lines that are not
    fields, like the chunk-size lines of chunked framing, are ignored (the format ignores unknown fields)."""
    data: list[bytes] = []
    for line in block.splitlines():
        if not line:
            if data:
                joined = b"\n".join(data)
                data = []
                if joined.strip():
                    yield joined
            continue
        name, _, value = line.partition(b":")
        if name != b"data":
            continue  # a comment (empty name), another field, or not a field
        data.append(value.removeprefix(b" "))  # `data` alone (no colon) is an empty data line
