"""The one rule for secrets in text servelab prints or stores: what is a secret, and what replaces it.

A name (an environment variable, a command-line flag, a header, a JSON key) names a secret when one of its
words (split at anything but letters and digits, and at lower-to-upper case changes) is a secret word
(PASS, PWD, AUTH, COOKIE, ...) or ends with a secret stem (KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL, ...):
`DB_PASS`, `hfToken`, `OPENAI_API_KEY` and `--api-key` are secrets, `--max-num-batched-tokens` and
`TOKENIZERS_PARALLELISM` are not. A value is redacted wherever it is, whatever it is named: the user info of a
URL (everything before the authority's last `@`, so a password holding `@` goes whole), `user:pass@host`
without a scheme, `Bearer` / `Basic` credentials, the shapes of well-known API tokens (hf_, sk-, ghp_, ...)
and `name=value` or `"name": "value"` pairs whose name is a secret.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

REDACTED = "<redacted>"

# a word that is a secret by itself, and stems a word ending with is one (APIKEY, ACCESSTOKEN, DBPASSWORD)
SECRET_WORDS = frozenset({"PASS", "PASSWD", "PWD", "AUTH", "AUTHORIZATION", "COOKIE", "BEARER", "SESSIONID"})
SECRET_STEMS = (
    "KEY", "KEYS", "TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSPHRASE", "CREDENTIAL",
    "CREDENTIALS",
)  # fmt: skip

_WORD = re.compile(r"[A-Z]+[a-z0-9]*|[a-z0-9]+|[A-Z]+(?![a-z])")
# scheme://userinfo@ (userinfo runs to the authority's last @: a password may hold one); scheme:/ too, as
# pathlib folds a URL given where a path was expected
_URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*:/{1,2})[^/?#\s]*@")
# user:password@host with no scheme (a proxy setting), a whole value or a word of text
_BARE_USERINFO = re.compile(r"(?<![\w/@:])[^\s:/@]+:[^\s/]*@(?=[\w.\[-])")
_AUTH_SCHEME = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)
_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[A-Z0-9]{16}|nvapi-[A-Za-z0-9_-]{16,}|glpat-[A-Za-z0-9_-]{16,})"
)
# name=value and "name": "value" (a query string, a --flag=value, a JSON document in an argument)
_ASSIGNED = re.compile(r"([A-Za-z0-9_.-]+)(=)([^\s&,;]*)")
_JSON_PAIR = re.compile(r"(\"([^\"\\]{1,100})\"\s*:\s*)\"((?:[^\"\\]|\\.)*)\"")


def words(name: str) -> list[str]:
    """The words of a name, upper case: `hfToken` -> HF, TOKEN; `--api-key` -> API, KEY."""
    return [w.upper() for w in _WORD.findall(name)]


def is_secret_name(name: str) -> bool:
    """Whether a variable, flag, header or key of this name holds a secret (the module's rule)."""
    found = words(name)
    joined = "".join(found)
    return any(w in SECRET_WORDS or w.endswith(SECRET_STEMS) for w in found) or joined.endswith(
        ("APIKEY", "ACCESSKEY", "AUTHTOKEN")
    )


def redact_url(text: str) -> str:
    """Drop the `user:pass@` part of every URL in text (and of a `user:pass@host` with no scheme)."""
    return _BARE_USERINFO.sub("", _URL_USERINFO.sub(r"\1", text))


def _assigned(m: re.Match) -> str:
    return m.group(1) + m.group(2) + (REDACTED if is_secret_name(m.group(1)) and m.group(3) else m.group(3))


def _json_pair(m: re.Match) -> str:
    return m.group(1) + '"' + (REDACTED if is_secret_name(m.group(2)) else m.group(3)) + '"'


def redact_text(text: str) -> str:
    """Every secret the rule finds in free text replaced (URL user info dropped)."""
    text = redact_url(text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _TOKEN_SHAPES.sub(REDACTED, text)
    text = _JSON_PAIR.sub(_json_pair, text)
    return _ASSIGNED.sub(_assigned, text)


def redact_env(env: Mapping[str, object]) -> dict[str, str]:
    """Values of secret names replaced, and secrets in the others' values."""
    return {k: REDACTED if is_secret_name(k) else redact_text(str(v)) for k, v in env.items()}


def redact_headers(headers: Mapping[str, object]) -> dict[str, str]:
    """HTTP headers as they may be shown: every value replaced (a header is how a secret travels)."""
    return dict.fromkeys(headers, REDACTED)


def _is_secret_flag(flag: str) -> bool:
    return flag.startswith("-") and is_secret_name(flag)


def redact_argv(argv: list[str]) -> list[str]:
    """The value after (or `=` in) a flag named like a secret replaced, and secrets in every other word."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            out.append(REDACTED)
        elif arg.startswith("-") and "=" in arg and _is_secret_flag(arg.split("=", 1)[0]):
            out.append(arg.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(redact_text(arg))
        hide_next = arg.startswith("-") and "=" not in arg and _is_secret_flag(arg)
    return out
