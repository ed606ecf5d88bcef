"""Every `servelab` command shown in README.md and docs/*.md runs as written.

What counts as a command: a line starting with `servelab ` (or `$ servelab `) in a fenced code block whose
first line is a command (a `servelab` line, a `$ ` prompt, or a ```bash block, where `&&` chains are split),
and the code spans of the README's tour table. Lines of output blocks are not commands.

What is not run, by rule:
- synopsis lines that stay vague: a synopsis runs in its fullest concrete form (optional groups without a
  placeholder kept, the others dropped), unless what is left still holds `|`, `...` or a placeholder in
  capitals (KEY, FILE, DIR, MODEL, N; not git's HEAD);
- commands whose prefix is in SKIP, each with its reason.

The commands of one block are a session: they run in order in one directory, which is also their HOME (shell
completion writes there), with the installed console script, after the files the doc's prose says are there
were made (SETUP: bench results against the mock server for the results and report sessions, a queries file,
a git checkout for the changelog). `servelab bench` talks to the mock server (servelab.bench.mock_server): its
URL replaces `URL` and the doc's http://127.0.0.1:8000, or is added where the doc gives none. Words with `*`
are expanded as the shell would.
Each command must exit 0, or where the doc shows `error: ...` after it, exit 2 (or the code a following
`$ echo $?` shows) with an `error:` line.
"""

import glob
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest
import typer

from servelab.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

SKIP = {
    "servelab bench --base-url http://127.0.0.1:8000 --model my-model --tokenizer": "builds 3072 prompts of "
    "exactly 1024 tokens with a tokenizer (minutes of CPU); tests/bench/test_tokenizer.py runs --tokenizer",
    # sweeps of thousands of requests take minutes on a shared runner; tests/bench (test_mock_runs.py,
    # test_rate_sweep.py) runs each kind of sweep small against the same mock server
    "servelab bench --max-concurrency 1,2,4": "a concurrency sweep of 7 x 640 requests (minutes)",
    "servelab bench --request-rate 1,5,10,inf": "1000 requests at 1 request/s first (17 minutes)",
    "servelab bench --request-rate sweep": "an automatic rate sweep of 10 x 500 requests (minutes)",
    "servelab results show 20261130-": "shows a run of the doc's Python API session; run ids are new",
}
PLACEHOLDER = re.compile(r"^(?!HEAD$)[A-Z][A-Z0-9_]*$")
DOC_SERVER = "http://127.0.0.1:8000"
COMMANDS = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


class DocCommand(NamedTuple):
    where: str  # file:line
    line: str
    exit_code: int  # what the doc says it returns
    session: str  # file:first line of its block: the commands of a block run in order in one directory


def _vague(words: list[str]) -> bool:
    return any("|" in w or "..." in w or PLACEHOLDER.match(w) for w in words)


def concrete_form(line: str) -> str | None:
    """The command a synopsis line stands for, or None where it holds a placeholder: an optional group
    (`[...]`) stays when it is concrete (`[--json]`, `[--dtype fp8]`) and goes when it is not (`[--pp N]`,
    `[--as a|b]`)."""
    code = re.split(r"\s#", line, maxsplit=1)[0]  # what follows `#` is a comment
    code = code.replace("--base-url URL", "--base-url " + DOC_SERVER)  # a server the test provides
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
                out.append(DocCommand(f"{path.name}:{n}", span, 0, f"{path.name}:{n}"))
    return out


def doc_commands() -> list[DocCommand]:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for start, info, body in _blocks(text):
            for offset, line, code in _from_block(info, body):
                name = path.relative_to(ROOT)
                found.append(DocCommand(f"{name}:{start + offset}", line, code, f"{name}:{start}"))
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


class Env(NamedTuple):
    server: str  # the mock server's URL


def _argv(line: str, env: Env, cwd: Path) -> list[str]:
    """The command as a shell in `cwd` would run it, against the test's server."""
    words = [w.replace(DOC_SERVER, env.server) for w in shlex.split(concrete_form(line) or "", comments=True)]
    if words[1] == "bench" and "--simulate" not in words:
        if not {"--base-url", "--host", "--port"} & set(words):
            words += ["--base-url", env.server]
    args = []
    for w in words[1:]:
        args += sorted(glob.glob(w, root_dir=cwd)) or [w] if "*" in w else [w]
    return _servelab() + args


def _servelab_run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    r = subprocess.run(_servelab() + args, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, f"setup: servelab {' '.join(args)}: {r.stderr[-300:]}"
    return r


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def mock_server(*args: str) -> Iterator[str]:
    """The mock server in its own process; yields its URL once it says it listens."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "servelab.bench.mock_server", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and "listening" in proc.stdout.readline()
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _results_session(where: Path, env: Env) -> None:
    """docs/results.md: base/ and slower/ hold `servelab bench` results against the mock server at 2 and 3
    ms per token, concurrency 4 and 8, two repetitions each; agg_mock_h200.json is an InferenceX result (the
    fields utils/process_result.py writes); notes.json is not a result."""
    for label, delay in (("base", "2"), ("slower", "3")):
        with mock_server("--token-delay-ms", delay) as url:
            for conc in (4, 8):
                for rep in (1, 2):
                    _servelab_run(
                        ["bench", "--base-url", url, "--max-concurrency", str(conc), "--num-prompts", "40"]
                        + ["--random-output-len", "32", "--save-result", "--result-dir", label]
                        + ["--result-filename", f"{label}-c{conc}-r{rep}.json"],
                        where,
                    )
    agg = {"hw": "h200", "conc": 4, "framework": "vllm", "precision": "fp8", "infmax_model_prefix": "mock"}
    agg |= {"model": "mock-model", "isl": 1024, "osl": 32, "tp": 1, "ep": 1, "dp_attention": "false"}
    agg |= {"tput_per_gpu": 2000.0, "output_tput_per_gpu": 1900.0, "median_ttft": 0.003, "median_tpot": 0.002}
    (where / "agg_mock_h200.json").write_text(json.dumps(agg))
    (where / "notes.json").write_text(json.dumps({"notes": "the mock server at 2 ms per token"}))


def _report_inputs(where: Path, env: Env) -> None:
    """docs/report.md: a results store holding a run named qwen-sweep, and a plan's JSON as predictions."""
    _servelab_run(
        [
            "bench",
            "--base-url",
            env.server,
            "--num-prompts",
            "20",
            "--save-result",
            "--result-filename",
            "s.json",
        ],
        where,
    )
    _servelab_run(["results", "import", "s.json", "--name", "qwen-sweep", "--store", "results.db"], where)
    (where / "s.json").unlink()
    (where / "plan.json").write_text(_servelab_run(["plan", "--json"], where).stdout)


def _queries(where: Path, env: Env) -> None:
    """docs/perfdb.md: queries.jsonl, one {"op": ..., shape fields} per line (two of the doc's shapes)."""
    lines = [
        {"op": "gemm", "m": 3000, "n": 4096, "k": 4096},
        {"op": "attention_decode", "batch": 64, "kv_len": 8192, "heads": 8, "kv_heads": 1, "head_dim": 128},
    ]
    (where / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in lines))


def _changelog_checkout(where: Path, env: Env) -> None:
    """docs/recipes.md: a git checkout holding a recipe store (the shipped one, in ./configs) at origin/main,
    and HEAD adding a changelog entry."""
    from servelab.recipes.recipe_store import DATA_DIR  # noqa: PLC0415 (the installed package's store)

    def git(*args: str) -> None:
        ident = ["-c", "user.name=doc test", "-c", "user.email=doc@test.invalid"]
        subprocess.run(["git", *ident, *args], cwd=where, check=True, capture_output=True, timeout=60)

    shutil.copytree(DATA_DIR, where / "configs")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "recipes")
    git("update-ref", "refs/remotes/origin/main", "HEAD")
    entry = ["", "- config-keys:", '    - "*-h200-*"', "  description:", '    - "Run the H200 recipes again"']
    entry += ["  pr-link: XXX", ""]
    with (where / "configs" / "perf-changelog.yaml").open("a") as f:
        f.write("\n".join(entry))
    git("commit", "-qam", "a changelog entry")


SETUP: dict[str, Callable[[Path, Env], None]] = {
    "servelab results import base/": _results_session,
    "servelab report --store results.db": _report_inputs,
    "servelab db query --batch queries.jsonl": _queries,
    "servelab changelog": _changelog_checkout,
}


def _run_session(cmds: list[DocCommand], where: Path, env: Env):
    where.mkdir()
    lines = [concrete_form(c.line) or "" for c in cmds]
    for prefix, setup in SETUP.items():
        if any(line.startswith(prefix) for line in lines):
            setup(where, env)
    # the session's directory is also its home: what a command writes there (shell completion, the default
    # results store) stays in the test
    home = os.environ | {"HOME": str(where), "SHELL": "/bin/bash"}
    for cmd in cmds:
        argv = _argv(cmd.line, env, where)
        r = subprocess.run(
            argv, cwd=where, env=home, capture_output=True, text=True, timeout=300, check=False
        )
        yield cmd, r


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
    sessions: dict[str, list[DocCommand]] = {}
    for cmd in doc_commands():
        if _skip_reason(cmd) is None:
            sessions.setdefault(cmd.session, []).append(cmd)
    with mock_server("--token-delay-ms", "0") as url, ThreadPoolExecutor(max_workers=4) as pool:
        env = Env(url)
        runs = pool.map(
            lambda ic: list(_run_session(ic[1], tmp_path / str(ic[0]), env)), enumerate(sessions.values())
        )
        results = [r for session in runs for r in session]
    failures = []
    for cmd, r in results:
        ok = r.returncode == cmd.exit_code and (cmd.exit_code == 0 or "error:" in r.stderr)
        if not ok or "Traceback" in r.stderr:
            tail = (r.stderr.strip() or r.stdout.strip())[-300:]
            failures.append(f"{cmd.where}: `{cmd.line}` exit {r.returncode} (doc: {cmd.exit_code}): {tail}")
    assert not failures, "\n".join(failures)
