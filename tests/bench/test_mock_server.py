"""The mock server's pieces made per request without json (mock_server.py): the same bytes as json writes."""

import asyncio
import json

import pytest

from servelab.bench import mock_server as m


@pytest.mark.parametrize("model", ["mock-model", 'a "quoted" 100% ü model'])
@pytest.mark.parametrize("obj", ["text_completion", "chat.completion.chunk"])
@pytest.mark.parametrize(("prompt_tokens", "completion_tokens"), [(0, 1), (32, 128), (123_456, 7)])
def test_the_usage_event_is_the_json_one(model, obj, prompt_tokens, completion_tokens):
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    expected = m._event({"id": "x", "object": obj, "model": model, "choices": [], "usage": usage})
    made = m._usage_event(m._usage_template(obj, model), prompt_tokens, completion_tokens)
    assert made == expected
    assert json.loads(made.split(b"\r\n")[1].removeprefix(b"data: "))["usage"] == usage


class Transport:
    def __init__(self) -> None:
        self.written = b""

    def write(self, data: bytes) -> None:
        self.written += data


@pytest.mark.parametrize(("body", "status"), [(b'{"prompt": "\xff"}', b"400"), (b"{not json", b"400")])
def test_a_body_that_is_not_json_text_is_refused(body, status):
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        proto = m.MockProtocol(m.Settings(m.parse_args([])))
        transport = Transport()
        proto.connection_made(transport)
        head = b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body)
        proto.data_received(head + body)
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    assert transport.written.startswith(b"HTTP/1.1 " + status) and b"body is not JSON" in transport.written
