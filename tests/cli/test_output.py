"""What the CLI prints fits: key columns whole at 80 columns on a terminal and at any width in a pipe, help
that never cuts an option name, `--version` and shell completion."""

import csv
import io
import json
import os
import pty
import re
import subprocess
import sys
from functools import cache

import pytest
import typer
from clirun import servelab
from typer.testing import CliRunner

from servelab import __version__
from servelab.cli.entry import version_line
from servelab.cli.main import app

PLAN = ["plan", "qwen3-32b", "--gpus", "4", "--isl", "2000", "--osl", "200", "--mode", "agg", "--top", "3"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run_piped(*args: str, columns: str | None = "80") -> subprocess.CompletedProcess:
    """Run with stdout not a terminal, as a pipe is, COLUMNS set to `columns` (None: not set): in the test's
    process (tests/clirun.py); the terminal's case below is a real process on a pseudo-terminal."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | ({"COLUMNS": columns} if columns else {})
    return servelab(*args, env=env)


def run_on_terminal(*args: str, columns: int = 80) -> str:
    """Run with stdout on a pseudo-terminal of `columns` columns; what it printed, colours stripped."""
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    env.pop("TTY_COMPATIBLE", None)
    env.pop("FORCE_COLOR", None)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "servelab.cli.main", *args], stdout=follower, stderr=subprocess.PIPE, env=env
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the follower side closed: the command is done
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=120) == 0, proc.stderr.read().decode() if proc.stderr else ""
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


@cache
def plan_candidates() -> tuple[dict, ...]:
    """The plan's candidates as its --json prints them, asked once a module (a plan process: about a second of
    CPU); the tests compare the other outputs of the same plan with them."""
    r = run_piped(*PLAN, "--json")
    assert r.returncode == 0, r.stderr
    return tuple(json.loads(r.stdout)["candidates"])


def plan_labels() -> list[str]:
    cands = plan_candidates()
    return [c["parallel"]["label"] + (f" x{c['replicas']}" if c["replicas"] > 1 else "") for c in cands]


def test_plan_in_a_pipe_shows_every_parallel_split_whole():
    labels = plan_labels()
    r = run_piped(*PLAN, columns=None)
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout
    for label in labels:
        assert f" {label} " in r.stdout
    assert "tok/s/user" in r.stdout and "band tok/s/GPU" in r.stdout  # every column, at natural width
    assert max(len(line) for line in r.stdout.splitlines()) > 120


def test_a_piped_table_fits_the_columns_it_is_given():
    """A CI log that sets COLUMNS gets tables of that width, keys whole, the columns that left named."""
    labels = plan_labels()
    printed = {}
    for width in (80, 120):
        r = run_piped(*PLAN, columns=str(width))
        assert r.returncode == 0, r.stderr
        table = [line for line in r.stdout.splitlines() if line[:1] in "┏┃┡│└"]
        assert table and max(len(line) for line in table) <= width, width
        assert "…" not in r.stdout
        for label in labels:
            assert f" {label} " in r.stdout
        printed[width] = r.stdout
    assert "not shown at this width" in printed[80]


def test_plan_and_recipes_as_csv_carry_the_json_numbers():
    as_json = plan_candidates()
    r = run_piped(*PLAN, "--csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [int(row["rank"]) for row in rows] == [c["rank"] for c in as_json]
    for row, cand in zip(rows, as_json, strict=True):
        assert row["parallel"] == cand["parallel"]["label"]
        assert (
            float(row["tpot_ms"]) == cand["tpot_ms"] and float(row["tok_s_per_gpu"]) == cand["tok_s_per_gpu"]
        )
    listed = list(csv.DictReader(io.StringIO(run_piped("recipes", "list", "--csv").stdout)))
    assert {"key", "model", "runner", "jobs"} <= set(listed[0]) and all(
        row["jobs"].isdigit() for row in listed
    )


def test_models_and_systems_as_csv_name_every_entry():
    models = list(csv.DictReader(io.StringIO(run_piped("models", "--csv").stdout)))
    as_json = json.loads(run_piped("models", "--json").stdout)["models"]
    assert [row["name"] for row in models] == [m["name"] for m in as_json]
    systems = list(csv.DictReader(io.StringIO(run_piped("systems", "--csv").stdout)))
    assert {"h200_sxm", "b200_sxm"} <= {row["name"] for row in systems}


@pytest.mark.slow  # 1.1 s of CPU a case: a whole plan, or every command's help
def test_plan_on_an_80_column_terminal_keeps_keys_and_fits():
    labels = plan_labels()
    out = run_on_terminal(*PLAN)
    assert "…" not in out
    for label in labels:
        assert f" {label} " in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "not shown at this width" in out  # the secondary columns that left are named


def test_systems_names_are_whole_in_a_pipe_and_on_a_terminal():
    r = run_piped("systems", "--json")
    names = [s["name"] for s in json.loads(r.stdout)["systems"]]
    assert "h200_sxm" in names
    for out in (run_piped("systems").stdout, run_on_terminal("systems")):
        assert "…" not in out
        for name in names:
            assert f" {name} " in out


def test_models_names_and_checkpoint_ids_are_whole_at_80_columns():
    r = run_piped("models", "--json")
    rows = json.loads(r.stdout)["models"]
    out = run_on_terminal("models")
    assert "…" not in out
    for row in rows:
        for name in (row["name"], *row["checkpoints"]):
            assert f" {name} " in out


def _commands(group, path=()):
    yield path, group
    for name, sub in getattr(group, "commands", {}).items():
        yield from _commands(sub, (*path, name))


@pytest.mark.slow  # 1.2 s of CPU a case: a whole plan, or every command's help
def test_every_help_at_80_columns_shows_every_option_name_whole_and_flags_take_no_value():
    root = typer.main.get_command(app)
    runner = CliRunner()
    seen = 0
    for path, command in _commands(root):
        out = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
        assert out.exit_code == 0, (path, out.output)
        text = out.stdout
        assert "…" not in text and "<bool>" not in text, path
        for param in command.params:
            for opt in (*param.opts, *param.secondary_opts):
                if opt.startswith("--"):
                    assert re.search(rf"(^|[\s,]){re.escape(opt)}([\s,]|$)", text, re.M), (path, opt)
                    seen += 1
    assert seen > 100  # bench alone has dozens


def test_version():
    r = run_piped("--version")
    assert r.returncode == 0 and r.stdout == version_line() + "\n" == f"servelab {__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", __version__)


def test_shell_completion_completes_commands_and_options():
    env = {
        **os.environ,
        "_SERVELAB_COMPLETE": "complete_bash",
        "COMP_WORDS": "servelab plan --tt",
        "COMP_CWORD": "2",
    }
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.argv[0] = 'servelab'; from servelab.cli.main import main; main()",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert "--ttft-ms" in r.stdout.split()
