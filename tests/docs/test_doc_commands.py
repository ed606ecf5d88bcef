r"""Every command shown in README.md and docs/*.md runs as written, or is skipped with its reason.

What counts as a command:
- in a fenced code block whose first line is a command (a `servelab` line, a `$ ` prompt, a `# ` comment, or
  any line of a ```bash block): its `servelab` lines (in a bash block, each `servelab` part of an `&&` chain),
  indented continuation lines and `\` joined; in a `$ ` transcript, every `$ ` line whatever the program (a
  setup step is a command too), the lines under it being its output;
- a `servelab` line of an indented (4-space) code block;
- the code spans of the README's tour table.
Usage blocks (```text blocks whose lines start with `usage:`) show the grammar, not a command: each of their
commands has a runnable example beside it.

How it runs: the commands of one block are a session, run in order by bash in one directory, which is also
their HOME, with this test's python and servelab first on the PATH, after the files the doc's prose says are
there were made (SETUP). The text is the doc's, but for one thing: `servelab bench` talks to the mock server
(servelab.bench.mock_server), whose URL replaces the doc's http://127.0.0.1:8000 and is added where the doc
gives no server. A command still holding a placeholder (a word in capitals: KEY, FILE, DIR; not git's HEAD)
fails unless SKIP names it with a reason.
Each command must exit 0, or the code the doc shows: 2 where its output starts with `error:` (with an `error:`
line on stderr), or what a `$ echo $?` under it prints.
"""

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest
import typer
from background_setups import setup_failure_once

from servelab.cli.main import app
from servelab.run.bfcl import bfcl_python
from servelab.runner.vllm_cpu import vllm_python

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
    "servelab bench --base-url http://127.0.0.1:8000 --endpoint /v1/chat/completions  --trace": (
        "replays a user's trace file; tests/bench/test_agentic_replay.py replays the pinned sample against "
        "the mock server, tests/e2e/test_agentic_vllm.py against the CPU vLLM"
    ),
    "servelab bench --trace traces.jsonl --max-concurrency 64 --max-seconds 3600": "an hour of trace replay "
    "(tests/bench/test_agentic_replay.py runs --max-seconds on the pinned sample)",
    "servelab results show 20261130-": "shows a run of the doc's Python API session; run ids are new",
    "servelab collect --system h200_sxm --out": "measures on 8 GPUs (tests/collect runs campaigns on a "
    "fake suite)",
    "servelab db merge campaigns/h200_sxm --into src/": "rewrites the shipped tables (tests/perfdb merges "
    "into a fresh directory)",
    "servelab calibrate engines": "fits for minutes to an hour, with AIConfigurator's answers "
    "(tests/calibrate fits a small sample, tests/predict/test_calibration_sources.py the CLI)",
    ".venv/bin/servelab calibrate engines": "as above: an hour-long fit with AIConfigurator",
    "servelab run workloads/gpt_oss_120b_h200.yaml --assert": "starts vLLM for gpt-oss-120b on GPUs",
    "servelab run workloads/gpt_oss_120b_h200.yaml --base-url": "5 x 512 requests of 1024 tokens (minutes "
    "against the mock; tests/run runs --stages and --repetitions small)",
    "servelab run workloads/gpt_oss_120b_h200.yaml --baseline": "a run of gpt-oss-120b on GPUs, and a "
    "baseline run id from an earlier one",
    "servelab run workloads/gpt_oss_120b_h200.yaml --resume": "resumes a run id of an earlier GPU run "
    "(tests/run/test_cli_run.py resumes one)",
    "servelab run --job jobs.json --job-index 0 --docker": "runs the job's pinned image with docker on GPUs",
    "servelab results push --to postgresql://": "needs a PostgreSQL server (tests/results/test_postgres.py "
    "pushes into a real one it starts)",
    "servelab results list --store postgresql://": "needs a PostgreSQL server "
    "(tests/results/test_postgres.py runs the results commands on a real one)",
    "servelab bench --simulate --model sgl-project/DeepSeek-V4-Flash-FP8 --system b200_sxm": "simulates 8 "
    "prompts of a million tokens (minutes); the same twin runs small in tests/bench/test_twin.py",
}
PLACEHOLDER = re.compile(r"^(?!HEAD$)[A-Z][A-Z0-9_]*$")
DOC_SERVER = "http://127.0.0.1:8000"
COMMANDS = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


class DocCommand(NamedTuple):
    where: str  # file:line
    line: str
    exit_code: int  # what the doc says it returns
    session: str  # file:first line of its block: the commands of a block run in order in one directory


def placeholders(line: str) -> list[str]:
    """The words of a command a user must replace before it runs (KEY, FILE, N, ...)."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        words = line.split()
    return [w for w in words[1:] if PLACEHOLDER.match(w.strip("[],.=|"))]


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


def _indented(text: str) -> Iterator[tuple[int, str]]:
    """(line number, command) of the servelab lines of indented code blocks (continuations joined)."""
    lines = text.splitlines()
    fenced = False
    n = 0
    while n < len(lines):
        line = lines[n]
        fenced ^= line.lstrip().startswith("```")
        code = line[4:] if line.startswith("    ") and not fenced else ""
        first = code.split("#", 1)[0].split()
        if first and first[0] in ("servelab", ".venv/bin/servelab"):
            start, joined = n + 1, code.strip()
            while joined.endswith("\\") and n + 1 < len(lines):
                n += 1
                joined = joined.removesuffix("\\").rstrip() + " " + lines[n].strip()
            yield start, joined
        n += 1


def _from_block(info: str, body: list[str]) -> list[tuple[int, str, int]]:
    """(offset, command, documented exit code) of the commands in one block."""
    first = body[0].strip() if body else ""
    prompt = first.startswith("$ ")
    if first.startswith("usage:") or not (prompt or first.startswith(("servelab ", "# ")) or info == "bash"):
        return []  # an output or usage block
    out: list[tuple[int, str, int]] = []
    joined: list[tuple[int, str]] = []
    for n, raw in enumerate(body):
        line = raw.strip()
        if joined and (joined[-1][1].endswith("\\") or (raw[:1].isspace() and not prompt)):
            # a backslash, or an indented line under a command, continues it
            joined[-1] = (joined[-1][0], joined[-1][1].removesuffix("\\") + " " + line)
        else:
            joined.append((n, line))
    for k, (n, line) in enumerate(joined):
        if prompt:
            if line.startswith("$ ") and line != "$ echo $?":
                out.append((n, line[2:], _documented_exit(joined[k + 1 :])))
            continue
        for part in line.split("&&"):
            part = part.strip()
            if _is_command(part):
                out.append((n, part, 0))
    return out


def _documented_exit(after: list[tuple[int, str]]) -> int:
    """What the output under a `$ ` command says of its exit: a following `$ echo $?` prints it; else 2 where
    the output starts with `error:`, 0 otherwise."""
    output = []
    for i, (_, line) in enumerate(after):
        if line == "$ echo $?" and i + 1 < len(after):
            return int(after[i + 1][1])
        if line.startswith("$ "):
            break
        output.append(line)
    return 2 if output and output[0].startswith("error:") else 0


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
        name = path.relative_to(ROOT)
        for start, info, body in _blocks(text):
            for offset, line, code in _from_block(info, body):
                found.append(DocCommand(f"{name}:{start + offset}", line, code, f"{name}:{start}"))
        for n, line in _indented(text):
            found.append(DocCommand(f"{name}:{n}", line, 0, f"{name}:{n}"))
        if path.name == "README.md":
            found += _tour_table(path, text)
    return found


def _cpu_vllm_missing() -> str | None:
    """Why docs/run.md's CPU vLLM flow cannot run here, or None (in CI once both installs have ended)."""
    failed = [why for name in ("vllm", "bfcl") if (why := setup_failure_once(name))]
    if failed:
        return "; ".join(failed)
    missing = []
    if vllm_python(ROOT / ".venv-vllm") is None:
        missing.append("the CPU vLLM (bash scripts/setup_vllm_cpu.sh)")
    try:
        import lm_eval  # noqa: F401, PLC0415 - only whether the evals extra is installed
    except ImportError:
        missing.append("lm-eval (the evals extra)")
    if bfcl_python() is None:
        missing.append("BFCL's environment (bash scripts/setup_bfcl.sh)")
    if not missing:
        return None
    return f"needs {', '.join(missing)}; tests/e2e/test_run_vllm.py runs the same flow where they are"


# sessions that run only where what they need is installed: the first command's prefix -> why not, or None
NEEDS: dict[str, Callable[[], str | None]] = {"bash scripts/setup_vllm_cpu.sh": _cpu_vllm_missing}


def _skip_reason(cmd: DocCommand) -> str | None:
    for prefix, why in SKIP.items():
        if cmd.line.startswith(prefix):
            return why
    return None


def _bin_dir(where: Path) -> Path:
    """A folder for the PATH's head: this test's python, and its servelab (a shim running this servelab
    where it is not installed as a console script)."""
    bin_dir = where / ".bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    # a script, not a symlink: a link to a virtual environment's python runs the base python (no pyvenv.cfg
    # beside the link), which does not have servelab
    python = bin_dir / "python"
    python.unlink(missing_ok=True)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    script = Path(sys.executable).with_name("servelab")
    shim = bin_dir / "servelab"
    shim.unlink(missing_ok=True)
    if script.exists():
        shim.symlink_to(script)
    else:
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m servelab.cli.main "$@"\n')
        shim.chmod(0o755)
    return bin_dir


def _servelab_run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """A setup step: this test's servelab, which must succeed."""
    script = Path(sys.executable).with_name("servelab")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "servelab.cli.main"]
    r = subprocess.run(argv + args, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, f"setup: servelab {' '.join(args)}: {r.stderr[-300:]}"
    return r


class Env(NamedTuple):
    server: str  # the mock server's URL


def _shell_line(line: str, env: Env) -> str:
    """The doc's line as bash runs it, against the test's server."""
    line = line.replace(DOC_SERVER, env.server)
    words = line.split()
    if words[:2] == ["servelab", "bench"] and "--simulate" not in words:
        if not {"--base-url", "--host", "--port"} & set(words):
            code, hash_, comment = line.partition(" #")
            line = f"{code.rstrip()} --base-url {env.server}" + (f" #{comment}" if hash_ else "")
    return line


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
    """docs/report.md: a results store holding a run named qwen-sweep, and a plan's JSON as predictions (a
    small question's, docs/plan.md's: 1.3 s of CPU where the default plan takes 3.3 s)."""
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
    plan = ["plan", "qwen3-32b", "--gpus", "4", "--tpot-ms", "40", "--mode", "agg", "--top", "5", "--json"]
    (where / "plan.json").write_text(_servelab_run(plan, where).stdout)


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


def _workloads(where: Path, env: Env) -> None:
    """docs/run.md: a perf-eval checkout's workloads/ (the pinned copies of perf-eval's files)."""
    shutil.copytree(ROOT / "tests" / "data" / "perf-eval" / "workloads", where / "workloads")


def _checkout_files(where: Path, env: Env) -> None:
    """docs/perfdb.md: commands that read a checkout's campaigns and shipped tables (read only)."""
    for name in ("campaigns", "src"):
        (where / name).symlink_to(ROOT / name)


def _pinned_test_data(where: Path, env: Env) -> None:
    """docs/estimate.md, docs/accuracy.md: estimates of the pinned MiniMax-M2.5 config.json under tests/data
    (read only)."""
    (where / "tests").symlink_to(ROOT / "tests")


def _cpu_vllm_checkout(where: Path, env: Env) -> None:
    """docs/run.md's CPU flow runs in a checkout: its scripts, docs/examples, .venv-vllm and .venv-bfcl."""
    for name in ("scripts", "docs", ".venv-vllm", ".venv-bfcl"):
        (where / name).symlink_to(ROOT / name)


SETUP: dict[str, Callable[[Path, Env], None]] = {
    "servelab results import base/": _results_session,
    "servelab report --store results.db": _report_inputs,
    "servelab db query --batch queries.jsonl": _queries,
    "servelab changelog": _changelog_checkout,
    "servelab run workloads/": _workloads,
    "servelab db compare-repeat campaigns/": _checkout_files,
    "servelab db validate src/": _checkout_files,
    "bash scripts/setup_vllm_cpu.sh": _cpu_vllm_checkout,
    "servelab estimate tests/data/": _pinned_test_data,
}


def _setups_of(cmds: list[DocCommand]) -> list[Callable[[Path, Env], None]]:
    """What a session's directory is given before its commands run: each SETUP step one of them asks for."""
    setups: list[Callable[[Path, Env], None]] = []
    for prefix, setup in SETUP.items():
        if setup not in setups and any(c.line.startswith(prefix) for c in cmds):
            setups.append(setup)
    return setups


def _run_by(sessions: dict[str, list[DocCommand]]) -> dict[str, str]:
    """Each session, with the session whose run gives its commands' results: the longest (then the first)
    whose first commands are its lines (less trailing comments), after the same setup. README.md's tour
    shows lines some docs' sessions begin with (`servelab calibrate roofline ... --dry-run`, `servelab
    plan`); a second run of them in a fresh directory of the same files tests nothing the first does not.
    Each result is still checked against its own doc's exit code."""
    order = list(sessions)
    lines = {s: [_without_comment(c.line) for c in cmds] for s, cmds in sessions.items()}
    setups = {s: _setups_of(cmds) for s, cmds in sessions.items()}

    def runs_it(s: str, other: str) -> bool:
        n = len(lines[s])
        return lines[other][:n] == lines[s] and setups[other] == setups[s]

    return {
        s: max((o for o in order if runs_it(s, o)), key=lambda o: (len(lines[o]), -order.index(o)))
        for s in order
    }


# a trailing bash comment holding no quote or `#` (so it is not inside a quoted word): bash does not run it
TRAILING_COMMENT = re.compile(r"\s+#\s[^'\"#]*$")


def _without_comment(line: str) -> str:
    """The command bash runs for a doc line: the line less a trailing comment (README.md's `servelab plan`
    is docs/plan.md's `servelab plan   # DeepSeek-V4-Flash ...`)."""
    return TRAILING_COMMENT.sub("", line)


def _run_session(cmds: list[DocCommand], where: Path, env: Env):
    where.mkdir()
    for setup in _setups_of(cmds):
        setup(where, env)
    # the session's directory is also its home: what a command writes there (shell completion, the default
    # results store) stays in the test
    path = f"{_bin_dir(where)}{os.pathsep}{os.environ['PATH']}"
    home = os.environ | {"HOME": str(where), "SHELL": "/bin/bash", "PATH": path}
    home.pop("COLUMNS", None)
    for cmd in cmds:
        # bash reading the line from stdin forks the command (`bash -c` would exec it): its parent is the
        # shell, as when a user types it (`--install-completion` asks the parent which shell it is)
        r = subprocess.run(
            ["bash"],
            input=_shell_line(cmd.line, env) + "\n",
            cwd=where,
            env=home,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        yield cmd, r


def test_the_docs_show_commands_and_the_rules_keep_most_to_run():
    cmds = doc_commands()
    runnable = [c for c in cmds if _skip_reason(c) is None]
    assert len(cmds) > 80 and len(runnable) > 0.75 * len(cmds), [c.line for c in runnable]


def test_no_command_keeps_a_placeholder_unless_it_is_skipped_with_a_reason():
    vague = [(c.where, c.line) for c in doc_commands() if placeholders(c.line) and _skip_reason(c) is None]
    assert vague == []


def test_every_skip_names_a_command_the_docs_show():
    lines = [c.line for c in doc_commands()]
    unused = [prefix for prefix in SKIP if not any(line.startswith(prefix) for line in lines)]
    assert unused == []


def test_the_example_files_are_the_ones_the_docs_show():
    """docs/run.md shows docs/examples/tiny-llama-cpu.yaml whole; the file is what its CPU flow runs."""
    text = (ROOT / "docs" / "run.md").read_text(encoding="utf-8")
    shown = next(
        body for _, info, body in _blocks(text) if info == "yaml" and body[0] == "name: tiny-llama-cpu"
    )
    assert "\n".join(shown) + "\n" == (ROOT / "docs" / "examples" / "tiny-llama-cpu.yaml").read_text()
    lines = (ROOT / "docs" / "examples" / "gsm8k.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all({"question", "answer"} <= json.loads(line).keys() for line in lines)


def test_extraction_rules():
    assert placeholders("servelab recipes show KEY --as servelab") == ["KEY"]
    assert placeholders("servelab changelog validate --base-ref origin/main --head-ref HEAD") == []
    assert not _is_command("servelab  TTFT 450.6 ms, TPOT 13.13 ms")
    block = ["$ servelab results import notes.json", "error: notes.json: not a known file", "$ echo $?", "3"]
    assert _from_block("", block) == [(0, "servelab results import notes.json", 3)]
    block = ["$ bash scripts/setup.sh", "$ PATH=x servelab run w.yaml", "run 1: fail", "$ echo $?", "1"]
    assert _from_block("text", block) == [
        (0, "bash scripts/setup.sh", 0),
        (1, "PATH=x servelab run w.yaml", 1),
    ]
    assert _from_block("bash", ["pip install . && servelab plan"]) == [(0, "servelab plan", 0)]
    assert _from_block("", ["question: ...", "servelab plan (CLI): 0.6 s"]) == []
    assert _from_block("text", ["usage: servelab db status [--json]"]) == []
    assert list(_indented("text\n\n    servelab memory x \\\n      --tp 2\n")) == [
        (3, "servelab memory x --tp 2")
    ]
    env = Env("http://127.0.0.1:9")
    assert _shell_line("servelab bench --num-prompts 4   # four", env) == (
        "servelab bench --num-prompts 4 --base-url http://127.0.0.1:9 # four"
    )
    assert _shell_line("servelab bench --base-url http://127.0.0.1:8000 -x", env) == (
        "servelab bench --base-url http://127.0.0.1:9 -x"
    )


def test_a_session_that_begins_another_one_is_run_by_it():
    def session(name: str, *lines: str) -> list[DocCommand]:
        return [DocCommand(f"{name}:{n}", line, 0, name) for n, line in enumerate(lines)]

    sessions = {
        "a": session("a", "servelab plan"),
        "b": session("b", "servelab plan", "servelab models"),
        "c": session("c", "servelab plan", "servelab models"),
        "d": session("d", "servelab changelog"),
        "e": session("e", "servelab changelog", "servelab plan"),
        "f": session("f", "servelab plan", "servelab db validate src/x"),  # f's directory has a checkout
        "g": session("g", "servelab models"),
        # the same command with a comment after it, and one whose `#` is inside a quoted word
        "h": session("h", "servelab sweep   # all", "servelab recipes list"),
        "i": session("i", "servelab sweep"),
        "j": session("j", "servelab bench --header 'x: # y'"),
        "k": session("k", "servelab bench --header 'x: # y'", "servelab models"),
        "l": session("l", "servelab bench --header 'x:"),
    }
    run_by = _run_by(sessions)
    assert run_by == {
        **{"a": "b", "b": "b", "c": "b", "d": "e", "e": "e", "f": "f", "g": "g"},
        **{"h": "h", "i": "h", "j": "k", "k": "k", "l": "l"},
    }


def _sessions() -> dict[str, list[DocCommand]]:
    """The commands that run, by session (a doc's block), in the docs' order."""
    sessions: dict[str, list[DocCommand]] = {}
    for cmd in doc_commands():
        if _skip_reason(cmd) is None:
            sessions.setdefault(cmd.session, []).append(cmd)
    return sessions


SESSIONS = _sessions()
RUN_BY = _run_by(SESSIONS)


def _needs_a_cpu_vllm(session: str) -> bool:
    return SESSIONS[session][0].line.startswith("bash scripts/setup_vllm_cpu.sh")


@pytest.fixture(scope="module")
def doc_env() -> Iterator[Env]:
    """The mock server the sessions' `servelab bench` lines talk to, one a pytest-xdist worker."""
    with mock_server("--token-delay-ms", "0") as url:
        yield Env(url)


# One case a session that runs (a session run by another is checked in that one's case): pytest-xdist shares
# the cases among its workers, where one test of all of them took 210-250 s on one worker. docs/run.md's CPU
# vLLM flow is an end-to-end case, queued with the other CPU vLLM tests (tests/xdist_order.py).
@pytest.mark.slow
@pytest.mark.parametrize(
    "session",
    [
        pytest.param(s, marks=[pytest.mark.e2e] if _needs_a_cpu_vllm(s) else [])
        for s in SESSIONS
        if RUN_BY[s] == s
    ],
)
def test_every_doc_command_runs_as_written(session, doc_env, tmp_path):
    cmds = SESSIONS[session]
    for prefix, missing in NEEDS.items():
        if cmds[0].line.startswith(prefix) and (why := missing()):
            pytest.skip(why)
    ran = list(_run_session(cmds, tmp_path / "session", doc_env))
    # a session run by this one gets the results of its first commands, one for each of its own
    results = [
        (cmd, r)
        for s, its in SESSIONS.items()
        if RUN_BY[s] == session
        for cmd, (_, r) in zip(its, ran, strict=False)
    ]
    failures = []
    for cmd, r in results:
        ok = r.returncode == cmd.exit_code and (cmd.exit_code != 2 or "error:" in r.stderr)
        if not ok or "Traceback" in r.stderr:
            tail = (r.stderr.strip() or r.stdout.strip())[-300:]
            failures.append(f"{cmd.where}: `{cmd.line}` exit {r.returncode} (doc: {cmd.exit_code}): {tail}")
    assert not failures, "\n".join(failures)
