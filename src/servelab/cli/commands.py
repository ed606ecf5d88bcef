"""Where each `servelab` command lives, with the one-line help `servelab --help` shows, so that the root
command imports none of them: `servelab --version` and `--help` start in the time Python and typer take, and
a command imports only its own module (tests/cli/test_lazy_commands.py keeps this table equal to the modules).
"""

from importlib import import_module
from typing import Any, NamedTuple

import typer
from typer.core import TyperGroup


class WholeHelpGroup(TyperGroup):
    """A group whose command list shows each command's first sentence whole, wrapped to the terminal: click
    cuts it with '...' where it passes the terminal's width (80 columns cut most of them)."""

    def format_commands(self, ctx, formatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class Command(NamedTuple):
    module: str  # the module under servelab.cli
    attr: str  # a function (a command) or a typer.Typer (a group of commands)
    short_help: str  # the first sentence of its help, as the module's docstring has it
    context_settings: dict[str, Any] | None = None


# in the order `servelab --help` lists them (typer's: single commands, then groups)
COMMANDS: dict[str, Command] = {
    "memory": Command(
        "memory",
        "memory",
        "Memory per GPU (weights, activations, reserve, KV cache), max KV tokens and max concurrent "
        "sequences.",
    ),
    "estimate": Command("estimate", "estimate", "Predict one deployment."),
    "plan": Command(
        "plan",
        "plan",
        "Search parallel configs, replicas, concurrency and prefill/decode splits; rank by output tok/s per "
        "GPU.",
    ),
    "collect": Command(
        "collect",
        "collect",
        "Measure op latencies (GEMM, attention, MLA, DeepSeek-V4 modules, MoE, collectives) into "
        "DIR/rows/*.jsonl.",
    ),
    "bench": Command(
        "bench",
        "bench",
        "Benchmark an OpenAI-compatible server like `vllm bench serve`, with a client that is never the "
        "bottleneck.",
        {"allow_interspersed_args": True},
    ),
    "sweep": Command(
        "sweep",
        "sweep",
        "Expand recipes into jobs, row for row as InferenceX's generate_sweep_configs.py, each with a "
        "fingerprint of what it runs.",
    ),
    "report": Command(
        "report",
        "report",
        "One HTML page: latency CDFs, TTFT / TPOT / throughput against concurrency or rate, the Pareto "
        "front, predicted against measured.",
    ),
    "run": Command(
        "run",
        "run",
        "Run a workload end to end: start the server, benchmark and evaluate it, judge assertions, store it.",
    ),
    "models": Command("models", "app", "List and show model specs."),
    "systems": Command("systems", "app", "List and show GPU systems."),
    "db": Command("db", "app", "Perf tables: query, status, accuracy, merge, validate, compare-repeat."),
    "recipes": Command(
        "recipes", "app", "Typed serving recipes: list, show, validate, render the launch command."
    ),
    "changelog": Command(
        "changelog", "app", "The append-only performance changelog that triggers benchmark runs."
    ),
    "results": Command(
        "results", "app", "The results store: list, show, compare, export, import, push runs."
    ),
    "calibrate": Command(
        "calibrate", "app", "Fit engine profiles and roofline efficiencies to measurements."
    ),
}


def new_app(cls: type[TyperGroup]) -> typer.Typer:
    """A typer app with the root's settings (each command is converted under them)."""
    return typer.Typer(
        cls=cls,
        name="servelab",
        help="LLM-serving performance: predict, collect per-op tables, benchmark servers, keep recipes.",
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        # click's plain help: option names are never cut (rich's boxed panels cut them at 80 columns) and
        # flags show no value type (rich's show `--json <bool>`)
        rich_markup_mode=None,
    )


def register(app: typer.Typer, name: str) -> None:
    """Add command `name` to `app`, importing its module."""
    entry = COMMANDS[name]
    module = import_module(f"servelab.cli.{entry.module}")
    target = getattr(module, entry.attr)
    if isinstance(target, typer.Typer):
        app.add_typer(target, name=name, cls=WholeHelpGroup)
    else:
        # a command module may name its own click command class (bench: vLLM's options it refuses)
        cls = getattr(module, "COMMAND_CLASS", None)
        app.command(name, cls=cls, context_settings=entry.context_settings)(target)


class LazyRoot(WholeHelpGroup):
    """The root `servelab` group: lists every command from COMMANDS and builds one, importing its module,
    only when it runs (or its help is asked for)."""

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, cmd_name: str):
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            one = new_app(TyperGroup)
            register(one, cmd_name)
            group = typer.main.get_group(one)
            self.add_command(group.commands[cmd_name], cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx, formatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, entry.short_help) for name, entry in COMMANDS.items()])
