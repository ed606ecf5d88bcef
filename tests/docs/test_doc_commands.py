"""Every `servelab` command shown in README.md and docs/*.md runs as written.

What counts as a command: a line starting with `servelab ` (or `$ servelab `) in a fenced code block whose
first line is a command (a `servelab` line, a `$ ` prompt, or a ```bash block, where `&&` chains are split),
and the code spans of the README's tour table. Lines of output blocks are not commands.

What is not run, by rule:
- synopsis lines that stay vague: a synopsis runs in its fullest concrete form (optional groups without a
  placeholder kept, the others dropped), unless what is left still holds `|`, `...` or a placeholder in
  capitals (KEY, FILE, DIR, MODEL, N);
- commands whose prefix is in SKIP, each with its reason (a server, a GPU, a git checkout, a file not given).

Each runs in its own empty directory with the installed console script; it must exit 0, or where the doc shows
`error: ...` after it, exit 2 (or the code a following `$ echo $?` shows) with an `error:` line.
"""

import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest
import typer

from servelab.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

SKIP = {
    "servelab bench": "needs a running inference server",
    "servelab collect": "needs a CUDA GPU and the collect extra (torch)",
    "servelab changelog": "needs a git checkout holding the refs it names (origin/main)",
    "servelab results": "the session in docs/results.md reads `servelab bench` results made against a server",
    "servelab report": "reads `servelab bench` result files made against a server (tests/report builds them)",
    "servelab db query --batch": "reads a queries file the doc describes but does not give",
    "servelab --install-completion": "writes to the user's shell start-up files",
}
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")
COMMANDS = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


class DocCommand(NamedTuple):
    where: str  # file:line
    line: str
    exit_code: int  # what the doc says it returns


def _vague(words: list[str]) -> bool:
    return any("|" in w or "..." in w or PLACEHOLDER.match(w) for w in words)


def concrete_form(line: str) -> str | None:
    """The command a synopsis line stands for, or None where it holds a placeholder: an optional group
    (`[...]`) stays when it is concrete (`[--json]`, `[--dtype fp8]`) and goes when it is not (`[--pp N]`,
    `[--as a|b]`)."""
    code = re.split(r"\s#", line, maxsplit=1)[0]  # what follows `#` is a comment
    kept = []
    for plain, group in re.findall(r"([^\[\]]+)|\[([^\]]*)\]", code):
        if group:
            if not _vague(group.split()):
                kept.append(group)
        else:
            kept.append(plain)
    words = " ".join(kept).split()
    return None if _vague(words[1:]) or "[" in words or "]" in words else " ".join(words)


def _is_command(line: str) -> bool:
    words = line.split()
    return len(words) > 1 and words[0] == "servelab" and (words[1] in COMMANDS or words[1].startswith("-"))


def _blocks(text: str):
    """(first line number, fence info, lines) of each fenced block."""
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            if start is None:
                start, info = i, line.strip()[3:]
            else:
                yield start + 2, info, lines[start + 1 : i]
                start = None


def _from_block(info: str, body: list[str]) -> list[tuple[int, str, int]]:
    """(offset, command, documented exit code) of the commands in one block."""
    first = body[0].strip() if body else ""
    prompt = first.startswith("$ ")
    if not (prompt or first.startswith("servelab ") or info == "bash"):
        return []  # an output block
    out: list[tuple[int, str, int]] = []
    joined: list[tuple[int, str]] = []
    for n, raw in enumerate(body):
        line = raw.strip()
        if joined and (joined[-1][1].endswith("\\") or (raw[:1].isspace() and not prompt)):
            # a backslash, or an indented line under a synopsis, continues the command
            joined[-1] = (joined[-1][0], joined[-1][1].removesuffix("\\") + " " + line)
        else:
            joined.append((n, line))
    for k, (n, line) in enumerate(joined):
        if prompt:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        for part in line.split("&&"):
            part = part.strip()
            if _is_command(part):
                out.append((n, part, _documented_exit(joined[k + 1 :]) if prompt else 0))
    return out


def _documented_exit(after: list[tuple[int, str]]) -> int:
    """2 where the output under a `$ ` command starts with `error:`, or what a following `$ echo $?` says."""
    if not after or not after[0][1].startswith("error:"):
        return 0
    for i, (_, line) in enumerate(after[:-1]):
        if line == "$ echo $?":
            return int(after[i + 1][1])
    return 2


def _tour_table(path: Path, text: str) -> list[DocCommand]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("| `servelab"):
            for span in re.findall(r"`(servelab [^`]*)`", line.split("|")[1]):
                out.append(DocCommand(f"{path.name}:{n}", span, 0))
    return out


def doc_commands() -> list[DocCommand]:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for start, info, body in _blocks(text):
            for offset, line, code in _from_block(info, body):
                found.append(DocCommand(f"{path.relative_to(ROOT)}:{start + offset}", line, code))
        if path.name == "README.md":
            found += _tour_table(path, text)
    return found


def _skip_reason(cmd: DocCommand) -> str | None:
    line = concrete_form(cmd.line)
    if line is None:
        return "a synopsis with placeholders"
    for prefix, why in SKIP.items():
        if line.startswith(prefix):
            return why
    return None


def _servelab() -> list[str]:
    script = Path(sys.executable).with_name("servelab")
    return [str(script)] if script.exists() else [sys.executable, "-m", "servelab.cli.main"]


def _run(cmd: DocCommand, where: Path) -> tuple[DocCommand, subprocess.CompletedProcess]:
    where.mkdir()
    argv = _servelab() + shlex.split(concrete_form(cmd.line) or "", comments=True)[1:]
    return cmd, subprocess.run(argv, cwd=where, capture_output=True, text=True, timeout=300, check=False)


def test_the_docs_show_commands_and_the_rules_keep_some_to_run():
    cmds = doc_commands()
    runnable = [c for c in cmds if _skip_reason(c) is None]
    assert len(cmds) > 30 and len(runnable) > 10, [c.line for c in runnable]


def test_extraction_rules():
    assert concrete_form("servelab recipes show KEY [--as servelab|inferencex]") is None
    assert concrete_form("servelab memory MODEL --system S --tp N") is None
    assert (
        concrete_form("servelab plan qwen3-32b --tpot-ms 40   # a comment ...")
        == "servelab plan qwen3-32b --tpot-ms 40"
    )
    assert concrete_form("servelab db status [--system S] [--json]") == "servelab db status --json"
    assert not _is_command("servelab  TTFT 450.6 ms, TPOT 13.13 ms")
    block = ["$ servelab results import notes.json", "error: notes.json: not a known file", "$ echo $?", "3"]
    assert _from_block("", block) == [(0, "servelab results import notes.json", 3)]
    assert _from_block("bash", ["pip install . && servelab plan"]) == [(0, "servelab plan", 0)]
    assert _from_block("", ["question: ...", "servelab plan (CLI): 0.6 s"]) == []


@pytest.mark.slow
def test_every_doc_command_runs_as_written(tmp_path):
    runnable = [c for c in doc_commands() if _skip_reason(c) is None]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda ic: _run(ic[1], tmp_path / str(ic[0])), enumerate(runnable)))
    failures = []
    for cmd, r in results:
        ok = r.returncode == cmd.exit_code and (cmd.exit_code == 0 or "error:" in r.stderr)
        if not ok or "Traceback" in r.stderr:
            tail = (r.stderr.strip() or r.stdout.strip())[-300:]
            failures.append(f"{cmd.where}: `{cmd.line}` exit {r.returncode} (doc: {cmd.exit_code}): {tail}")
    assert not failures, "\n".join(failures)
