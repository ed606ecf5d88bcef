"""Chat framing of random prompts, as InferenceX's client does it (`--use-chat-template`, `--dsv4`).

InferenceX's benchmark_serving.py wraps each random prompt in a one-message chat (a user turn, then the
assistant's generation prompt) and sends the framed text; its input length is the set length less the
template's own tokens, so the framed prompt has about the set length. Two framings:

- the tokenizer's chat template (a Jinja template in tokenizer_config.json or chat_template.jinja beside the
  tokenizer), rendered as transformers renders it: a sandboxed Jinja environment with trim_blocks and
  lstrip_blocks, `messages`, `add_generation_prompt` and the tokenizer's special tokens as variables;
- DeepSeek-V4's framing (`--dsv4`), which InferenceX renders with its own encoder instead of a template:
  begin-of-sentence, the user token, the text, the assistant token and `<think>` (thinking mode).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from servelab.errors import ServelabError

# DeepSeek-V4's special tokens (its tokenizer's added tokens), in a one-turn thinking prompt's order
DSV4_BOS = "<｜begin▁of▁sentence｜>"
DSV4_USER = "<｜User｜>"
DSV4_ASSISTANT = "<｜Assistant｜>"
DSV4_THINK = "<think>"
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token")

Framing = Callable[[str], str]


def dsv4_prompt(text: str) -> str:
    """One user turn in DeepSeek-V4's thinking-mode framing (InferenceX's `--dsv4`)."""
    return f"{DSV4_BOS}{DSV4_USER}{text}{DSV4_ASSISTANT}{DSV4_THINK}"


def template_framing(
    tokenizer_dir: Path, what: str, kwargs: dict | None = None, purpose: str = "--use-chat-template"
) -> Framing:
    """The tokenizer's chat template as a function of the user text, rendered with `kwargs` as more template
    variables (vLLM's --chat-template-kwargs); one line naming `what` (the --tokenizer value) and `purpose`
    (the option that asked for it) when the folder has no template or Jinja is missing."""
    config = _read_json(tokenizer_dir / "tokenizer_config.json")
    source = _template_source(tokenizer_dir, config)
    if source is None:
        raise ServelabError(
            f"--tokenizer {what}: no chat template for {purpose} (tokenizer_config.json "
            "chat_template or chat_template.jinja)"
        )
    try:
        from jinja2 import TemplateError  # noqa: PLC0415 (optional: only chat framing needs it)
        from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: PLC0415
    except ImportError:
        raise ServelabError(
            f"{purpose} renders the tokenizer's Jinja chat template: pip install jinja2"
        ) from None

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda f: datetime.now().strftime(f))
    try:
        template = env.from_string(source)
    except TemplateError as e:
        raise ServelabError(f"--tokenizer {what}: its chat template does not parse ({e})") from None
    tokens = {name: _token_text(config.get(name)) for name in SPECIAL_TOKEN_NAMES}

    def frame(text: str) -> str:
        try:
            variables = {**(kwargs or {}), **tokens}
            return template.render(
                messages=[{"role": "user", "content": text}], add_generation_prompt=True, **variables
            )
        except TemplateError as e:
            raise ServelabError(f"--tokenizer {what}: its chat template failed on a prompt ({e})") from None

    return frame


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ServelabError(f"{path}: cannot read it as JSON ({e})") from None
    return data if isinstance(data, dict) else {}


def _template_source(tokenizer_dir: Path, config: dict) -> str | None:
    """The default chat template: chat_template.jinja, else tokenizer_config.json's `chat_template` (a string,
    or a list of named templates of which `default` is taken, as transformers takes it)."""
    jinja = tokenizer_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    value = config.get("chat_template")
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        value = named.get("default")
    return value if isinstance(value, str) else None


def _token_text(value: object) -> str | None:
    """A special token as tokenizer_config.json writes it: the text, or an AddedToken dict with `content`."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
