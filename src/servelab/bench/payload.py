"""Pre-serialized HTTP/1.1 requests: built once before the run so the hot loop only writes bytes.

The API key (OPENAI_API_KEY) goes into the Authorization header of these bytes and nowhere else:
never into configs, records, logs or result files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Target:
    """Where requests go: host, port, TLS, and the path prefix of the base URL."""

    host: str
    port: int
    tls: bool
    path_prefix: str

    @classmethod
    def from_url(cls, base_url: str) -> Target:
        u = urlsplit(base_url)
        tls = u.scheme == "https"
        return cls(u.hostname or "127.0.0.1", u.port or (443 if tls else 80), tls, u.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        default = 443 if self.tls else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class RequestTemplate:
    """Everything but the prompt; `encode` renders one request's bytes."""

    target: Target
    endpoint: str
    model: str
    chat: bool
    stream: bool = True
    ignore_eos: bool = True
    sampling: dict = field(default_factory=dict)
    api_key: str | None = field(default=None, repr=False)

    def body(self, prompt: str | list[dict], max_tokens: int) -> dict:
        body: dict = {"model": self.model}
        if self.chat:
            messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
            body["messages"] = messages
            body["max_completion_tokens"] = max_tokens
        else:
            body["prompt"] = prompt if isinstance(prompt, str) else _flatten(prompt)
            body["max_tokens"] = max_tokens
        body["stream"] = self.stream
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        if self.ignore_eos:
            body["ignore_eos"] = True
        body.update(self.sampling)
        return body

    def encode(self, prompt: str | list[dict], max_tokens: int, request_id: str = "") -> bytes:
        payload = json.dumps(self.body(prompt, max_tokens), separators=(",", ":")).encode()
        head = [
            f"POST {self.target.path_prefix}{self.endpoint} HTTP/1.1",
            f"Host: {self.target.host_header}",
            "Content-Type: application/json",
            "Accept: text/event-stream" if self.stream else "Accept: application/json",
            f"Content-Length: {len(payload)}",
            "Connection: keep-alive",
        ]
        if request_id:
            head.append(f"X-Request-Id: {request_id}")
        if self.api_key:
            head.append(f"Authorization: Bearer {self.api_key}")
        return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


def _flatten(messages: list[dict]) -> str:
    """A conversation as one completions prompt (the /v1/completions form of a multiturn request)."""
    return "".join(m["content"] for m in messages)


def api_key_from_env() -> str | None:
    return os.environ.get("OPENAI_API_KEY") or None
