"""The root command imports no command module: `servelab --version` loads neither typer nor any command,
`--help` lists every command from servelab.cli.commands without importing one, and a command imports only
its own module. The table's help lines and order are the modules' own (the full app's)."""

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import typer
from typer.testing import CliRunner

from servelab import __version__
from servelab.cli.commands import COMMANDS
from servelab.cli.main import app, root_app

ROOT = Path(__file__).resolve().parents[2]

# run the console script's function in a fresh interpreter, then name the servelab.cli modules it imported
PROBE = """
import json, sys
sys.argv = ["servelab", *json.loads(sys.argv[1])]
from servelab.cli.entry import main
try:
    main()
except SystemExit:
    pass
print(json.dumps({"cli": sorted(m for m in sys.modules if m.startswith("servelab.cli.")),
                  "typer": "typer" in sys.modules}), file=sys.stderr)
"""


def imported(*args: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(r.stderr.strip().splitlines()[-1])


def test_the_table_holds_each_command_with_its_own_help_in_order():
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    assert list(commands) == list(COMMANDS)
    for name, entry in COMMANDS.items():
        assert commands[name].get_short_help_str(limit=10_000) == entry.short_help, name


def test_the_lazy_root_helps_and_runs_as_the_full_app():
    runner = CliRunner()
    for args in (["--help"], ["systems", "--help"], ["bench", "--help"], ["systems", "list"], ["nope"]):
        lazy, full = runner.invoke(root_app(), args), runner.invoke(app, args)
        assert (lazy.exit_code, lazy.output) == (full.exit_code, full.output), args


def test_version_loads_no_typer_and_help_no_command():
    version = imported("--version")
    assert version == {"cli": ["servelab.cli.entry"], "typer": False}
    assert imported("--help")["cli"] == ["servelab.cli.commands", "servelab.cli.entry", "servelab.cli.main"]


def test_a_command_imports_its_own_module_only():
    cli = imported("systems", "list")["cli"]
    assert "servelab.cli.systems" in cli
    assert not {
        f"servelab.cli.{entry.module}" for name, entry in COMMANDS.items() if name != "systems"
    } & set(cli)


def test_the_version_printed_is_the_distributions():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__
    assert project["scripts"]["servelab"] == "servelab.cli.entry:main"


def test_plan_imports_neither_rich_nor_the_engines_flag_grammars():
    # a `servelab plan --json` prints no table, and prices with no engine's flag grammar or release catalogue
    probe = "import json, sys, servelab.cli.plan; print(json.dumps(sorted(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    modules = set(json.loads(r.stdout))
    assert "servelab.predict.plan.search" in modules
    assert not {m for m in modules if m == "rich" or m.startswith("rich.")}
    assert not {"servelab.engines.releases", "servelab.engines.command", "servelab.engines.grammar"} & modules
