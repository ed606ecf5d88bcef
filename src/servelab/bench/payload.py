"""Pre-serialized HTTP/1.1 requests: built once before the run so the hot loop only writes bytes.

Secrets go into the headers of these bytes and nowhere else (never into configs, records, logs or result
files): the API key (OPENAI_API_KEY, sent as a Bearer token), credentials in the base URL (user:password@,
sent as HTTP basic auth and stripped from the URL that is stored and printed), and --header values.
Everything that reaches a request head is checked first: a control character (CR, LF, ...) in a value
would end the header and inject others, so it is refused naming its source.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit, urlunsplit

from servelab.errors import ServelabError

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # C0 controls but tab, and DEL
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name (RFC 9110 token)
_FRAMING = {"host", "content-length", "content-type", "transfer-encoding", "connection"}  # set by servelab


def check_header_value(value: str) -> str:
    """`value`, or a ValueError when it holds a control character (the caller names the source)."""
    if _CONTROL.search(value):
        raise ValueError("contains a control character (CR, LF or another), which would inject HTTP headers")
    _check_utf8(value)
    return value


def _check_utf8(value: str) -> None:
    """Bytes that were not UTF-8 on the command line reach Python as surrogates: no request carries them."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("is not valid UTF-8") from None


def check_header(name: str, value: str) -> tuple[str, str]:
    """One extra header: a token for a name, no control characters, not one that frames the request."""
    if not _TOKEN.fullmatch(name):
        raise ValueError(f"header name {name!r} is not an HTTP token")
    if name.lower() in _FRAMING:
        raise ValueError(f"{name} is set by servelab")
    try:
        return name, check_header_value(value)
    except ValueError as e:
        raise ValueError(f"the value of {name} {e}") from None


def check_base_url(url: str) -> str:
    """A base URL that can be connected to and put in a request head; the message never echoes credentials."""
    if _CONTROL.search(url) or " " in url:
        raise ValueError("contains a space or a control character")
    _check_utf8(url)
    u = urlsplit(url)
    if u.scheme not in ("http", "https"):
        raise ValueError("must start with http:// or https://")
    if not u.hostname:
        raise ValueError("has no host name")
    try:
        port = u.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"port {u.netloc.rpartition(':')[2]!r} is not a number in 1-65535")
    if u.query or u.fragment:
        raise ValueError("must not have a query or a fragment")
    return url


def split_credentials(url: str) -> tuple[str, str | None]:
    """(the URL without user:password@, the basic-auth header value or None)."""
    u = urlsplit(url)
    if u.username is None and u.password is None:
        return url, None
    host = u.netloc.rpartition("@")[2]
    user_pass = f"{unquote(u.username or '')}:{unquote(u.password or '')}"
    auth = "Basic " + base64.b64encode(user_pass.encode()).decode()
    return urlunsplit((u.scheme, host, u.path, u.query, u.fragment)), auth


@dataclass(frozen=True)
class Target:
    """Where requests go: host, port, TLS, and the path prefix of the base URL."""

    host: str
    port: int
    tls: bool
    path_prefix: str
    verify: bool = True  # https: check the server's certificate (vLLM's --insecure turns it off)

    @classmethod
    def from_url(cls, base_url: str, verify: bool = True) -> Target:
        u = urlsplit(base_url)
        tls = u.scheme == "https"
        port = u.port or (443 if tls else 80)
        return cls(u.hostname or "127.0.0.1", port, tls, u.path.rstrip("/"), verify)

    def tls_context(self) -> ssl.SSLContext | None:
        """The TLS context of an https target (None for http); without `verify`, one that checks nothing."""
        if not self.tls:
            return None
        ctx = ssl.create_default_context()
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    @property
    def host_header(self) -> str:
        default = 443 if self.tls else 80
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        return host if self.port == default else f"{host}:{self.port}"


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
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # auth and --header; secrets

    def body(self, prompt: str | list[dict], max_tokens: int, model: str | None = None) -> dict:
        body: dict = {"model": model or self.model}
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

    def encode(
        self, prompt: str | list[dict], max_tokens: int, request_id: str = "", model: str | None = None
    ) -> bytes:
        """One request's bytes; `model` names another model than the template's (a LoRA adapter)."""
        payload = json.dumps(self.body(prompt, max_tokens, model), separators=(",", ":")).encode()
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
        head.extend(f"{name}: {value}" for name, value in self.headers)
        return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


def without_request_id(payload: bytes) -> bytes:
    """A request's bytes (RequestTemplate.encode) without its X-Request-Id header."""
    head, sep, body = payload.partition(b"\r\n\r\n")
    lines = [line for line in head.split(b"\r\n") if not line.startswith(b"X-Request-Id: ")]
    return b"\r\n".join(lines) + sep + body


def _flatten(messages: list[dict]) -> str:
    """A conversation as one completions prompt (the /v1/completions form of a multiturn request)."""
    return "".join(m["content"] for m in messages)


def api_key_from_env() -> str | None:
    key = os.environ.get("OPENAI_API_KEY") or None
    if key is not None:
        try:
            check_header_value(key)
        except ValueError as e:
            raise ServelabError(f"OPENAI_API_KEY {e}") from None
    return key


def auth_headers(api_key: str | None, basic_auth: str | None, extra: dict[str, str]) -> tuple:
    """Every header a request carries besides the framing: Authorization from exactly one source, then the
    --header values."""
    sources = [
        s
        for s, given in (
            ("OPENAI_API_KEY", api_key),
            ("credentials in --base-url", basic_auth),
            ("--header Authorization", any(k.lower() == "authorization" for k in extra)),
        )
        if given
    ]
    if len(sources) > 1:
        raise ServelabError(f"{' and '.join(sources)} both set the Authorization header; give one")
    headers = []
    if api_key:
        headers.append(("Authorization", f"Bearer {api_key}"))
    if basic_auth:
        headers.append(("Authorization", basic_auth))
    headers.extend(extra.items())
    return tuple(headers)
