"""Every `--help` read in an 80-column pipe shows what matters whole: option names, and each command's
first sentence in the command lists (click cuts those with '...' at the terminal's width)."""

import pytest
import typer
from typer.testing import CliRunner

from servelab.cli.main import app

ROOT = typer.main.get_command(app)


def _commands(cmd, path=()):
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def _help(path) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.slow  # 1.1 s of CPU a case: a whole plan, or every command's help
def test_help_fits_80_columns_and_names_every_option_whole():
    for path, cmd in _commands(ROOT):
        text = _help(path)
        assert max(len(line) for line in text.splitlines()) <= 80, path
        words = text.split()
        for param in cmd.params:
            for decl in getattr(param, "opts", []):
                if decl.startswith("-"):
                    assert decl in words or f"{decl}," in words, (path, decl)


def test_command_lists_show_each_first_sentence_whole():
    for path, cmd in _commands(ROOT):
        subs = getattr(cmd, "commands", {})
        if not subs:
            continue
        text = "".join(_help(path).split())  # wrapped lines joined, however they broke
        for name, sub in subs.items():
            sentence = "".join(sub.get_short_help_str(limit=10_000).split())
            assert name + sentence in text, (path, name)


def test_every_option_of_every_command_says_what_it_does():
    """`--help` documents every option (issue 31: `bench --help` had 38 of 88 without a word)."""
    bare = [
        (" ".join(path), param.opts[0])
        for path, cmd in _commands(ROOT)
        for param in cmd.params
        if getattr(param, "param_type_name", "") == "option" and not param.hidden and not param.help
    ]
    assert bare == []
