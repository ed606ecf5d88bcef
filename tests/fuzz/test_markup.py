"""Rich markup and terminal escape sequences in what users name: a run whose model id or label is rich
markup (`x[/]y`, `[link=...]`) or holds an escape sequence is listed, shown, compared and exported like any
other, shown as written (control characters escaped), never as markup and never raw to the terminal."""

from __future__ import annotations

import json

import pytest
from fuzzkit import hostile
from quick_diagonal import pairs

MARKUP = {
    "close-nothing": "x[/]y",
    "bare-close": "[/]",
    "style": "[bold]loud",
    "styled-pair": "[red]x[/red]",
    "link": "[link=https://evil.example]click[/link]",
    "open-bracket": "a[b",
    "close-bracket": "]",
    "escaped": "\\[escaped]",
    "close-tag": "[/bold]",
    "emoji-code": ":warning: x",
    "sgr": "x\x1b[31mred",
    "osc-title": "\x1b]0;pwned\x07name",
    "clear-screen": "\x1b[2J\x1b[Hname",
    "carriage-return": "shown\rhidden",
    "bidi": "\u202eevil",
    "nul": "a\x00b",
    "long": "[" * 300 + "x",
}
RAW = ("\x1b", "\r", "\x07", "\x00", "\u202e")


def _result(model_id: str, label: str) -> dict:
    return {
        "date": "20261130-101500", "backend": "openai", "label": label, "model_id": model_id,
        "num_prompts": 4, "request_rate": "inf", "max_concurrency": 2, "duration": 2.0, "completed": 4,
        "failed": 0, "median_ttft_ms": 110.0, "median_tpot_ms": 24.5, "output_throughput": 400.0,
    }  # fmt: skip


@pytest.fixture
def store(tmp_path, request) -> tuple[str, str, str]:
    """A store holding two runs named `name` (model id and label alike); (store, name, a run id)."""
    name = MARKUP[request.param]
    ids = []
    for i in range(2):
        f = tmp_path / f"r{i}.json"
        f.write_text(json.dumps(_result(name, name) | {"duration": 2.0 + i}))
        r = hostile("results", "import", str(f), "--store", str(tmp_path / "s.db"), "--json", codes=(0,))
        ids.append(json.loads(r.out)["imported"][0]["run_id"])
    return str(tmp_path / "s.db"), name, ids[0]


COMMANDS = {
    "list": ("results", "list", "--store", "{store}"),
    "list-csv": ("results", "list", "--csv", "--store", "{store}"),
    "show": ("results", "show", "{id}", "--store", "{store}"),
    "compare-by-name": ("results", "compare", "{name}", "{name}", "--store", "{store}"),
    "compare-by-id": ("results", "compare", "{id}", "{id}", "--store", "{store}"),
    "export": ("results", "export", "--store", "{store}"),
}


@pytest.mark.parametrize(
    ("store", "command"), pairs(MARKUP, COMMANDS), indirect=["store"]
)  # a diagonal quick
def test_names_are_shown_as_written(store, command):
    path, name, run_id = store
    args = [a.format(store=path, name=name, id=run_id) for a in COMMANDS[command]]
    if "\x00" in name and "{name}" in " ".join(COMMANDS[command]):
        pytest.skip("the OS passes no NUL in argv")
    r = hostile(*args, codes=(0,))
    if command != "export" and command != "list-csv":  # CSV carries the bytes as they are, for programs
        assert not any(c in r.out for c in RAW), repr(r.out[:500])
    if name.isprintable() and len(name) < 100 and command in ("list", "show", "compare-by-name"):
        assert name in r.out, r.out  # as written, not eaten as markup
