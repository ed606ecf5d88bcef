"""What a captured launch adds to servelab's adapter rendering: a launch profile's `Extras` for one job.

A capture (sandbox.py) holds the server argv upstream's script ran, the environment it added and the files its
argv names. The adapter renders the bare key (the recipe's typed fields and the arm's layout); the residual is
what upstream runs beyond that: flags to add (upstream's tokens), the adapter's flags to drop (upstream does
not pass them, or passes another value), env, TensorRT-LLM's options and files of upstream's tree (chat
templates). Rendering the job with its residual gives upstream's launch; scripts/ix_launch.py folds the
residuals of every job of a script into one profile. Flags are read through the engine's grammar
(servelab.engines).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from servelab.engines import argv as argvlib
from servelab.engines.command import grammar_of
from servelab.engines.grammar import Grammar
from servelab.recipes.engines import ENGINES, engine_name
from servelab.recipes.engines.profiles import MODEL_SLOT, Extras
from servelab.recipes.ix_client import client_options

# Flags the runner owns (where the server listens): never compared, never dropped. ATOM's HTTP port is
# --server-port (its --port is the engine's internal one, which upstream's scripts do set).
RUNNER_FLAGS = {"--host", "--port", "--server-port"}
# TensorRT-LLM's options file: its content is compared, not its name.
OPTIONS_FLAGS = {"--extra-llm-api-options", "--config"}
# The port the capture's jobs run with (InferenceX's launchers pass PORT=8888).
CAPTURE_PORT = 8888


def server_flags(grammar: Grammar, argv: list[str]) -> list[argvlib.Arg]:
    """The flags of a server command (program words and the positional model left out)."""
    return [a for a in grammar.args(grammar.split(argv)[1]) if a.is_flag]


def groups(grammar: Grammar, argv: list[str]) -> list[list[str]]:
    """A command's flags as token groups (a flag and its value, or a flag alone), positionals left out."""
    return [list(a.tokens) for a in server_flags(grammar, argv)]


def pairs(grammar: Grammar, argv: list[str]) -> list[tuple[str, str | None]]:
    """(canonical name, value) of every flag of a command, in the engine's grammar."""
    return [(str(a.name), a.value) for a in server_flags(grammar, argv)]


def pair_of(grammar: Grammar, group: list[str]) -> tuple[str, str | None]:
    return pairs(grammar, group)[0]


def upstream_options(grammar: Grammar, record: dict) -> dict:
    """The engine options file upstream's argv names (TensorRT-LLM's YAML), read."""
    for name, value in pairs(grammar, record["argv"]):
        if name in OPTIONS_FLAGS and value:
            return yaml.safe_load(record["files"][Path(value).name]) or {}
    return {}


def upstream_files(grammar: Grammar, record: dict) -> dict[str, str]:
    """Files of upstream's tree a flag hands the server (chat templates), by the path the flag names."""
    return {
        value: record["files"][Path(value).name]
        for name, value in pairs(grammar, record["argv"])
        if name not in OPTIONS_FLAGS and value and Path(value).name in record["files"]
    }


def residual(record: dict, recipe, arm, max_model_len: int | None, slot: bool = True) -> dict:
    """What upstream runs for this job beyond what servelab's adapter renders for the bare imported key:
    flags to add (upstream's tokens), adapter flags to drop (as the adapter spells them, hyphenated), env and
    engine options. With `slot`, the model id becomes `{model}` so keys of one script with different
    checkpoints share a profile."""
    engine = engine_name(recipe.framework)
    grammar = grammar_of(engine)
    # Without speculative decoding: the bare key has no speculative config, and the flags come from upstream.
    plain = arm.model_copy(update={"spec_decoding": "none"})
    bare = ENGINES[engine](recipe, plain, max_model_len, CAPTURE_PORT, Extras())
    model = recipe.model
    put = (lambda t: t.replace(model, MODEL_SLOT)) if slot else (lambda t: t)
    ours = {(str(a.name), a.value): argvlib.canonical(a.tokens[0]) for a in server_flags(grammar, bare.argv)}
    theirs = [g for g in groups(grammar, record["argv"]) if pair_of(grammar, g)[0] not in OPTIONS_FLAGS]
    theirs_pairs = {pair_of(grammar, g) for g in theirs}
    args = [put(t) for g in theirs if pair_of(grammar, g) not in ours for t in g]
    drop = sorted(
        {
            spelled
            for (n, v), spelled in ours.items()
            if n not in RUNNER_FLAGS | OPTIONS_FLAGS and (n, v) not in theirs_pairs
        }
    )
    return {
        "args": args,
        "env": {k: put(v) for k, v in record["env"].items()},
        "options": upstream_options(grammar, record),
        "files": upstream_files(grammar, record),
        "drop": drop,
        "client": client_options(record.get("bench", [])),
    }


def launch_extras(record: dict, recipe, arm, max_model_len: int | None) -> Extras:
    """The extras that make the adapter render exactly the launch of `record` for this job."""
    return Extras.model_validate(residual(record, recipe, arm, max_model_len, slot=False))
