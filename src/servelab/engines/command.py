"""Server commands of every engine: which engine a command starts, its typed settings, and back.

    parse(Engine.VLLM, ["vllm", "serve", "m", "-tp", "8"]).tp == 8
    render(Engine.SGLANG, settings).argv == ["python3", "-m", "sglang.launch_server", "--model-path", ...]

Every reader of a server command in servelab goes through here (or through an engine's Grammar), so that a
flag means one thing everywhere: the recipe adapters, perf-eval serve_args, InferenceX's captured launches,
`recipes validate`, `servelab run` and the twin's view of a recorded run.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from servelab.engines.atom.grammar import GRAMMAR as ATOM
from servelab.engines.grammar import Grammar, ServerCommand
from servelab.engines.names import Engine, engine_of
from servelab.engines.settings import ServerSettings
from servelab.engines.sglang.grammar import GRAMMAR as SGLANG
from servelab.engines.trtllm.grammar import GRAMMAR as TRTLLM
from servelab.engines.vllm.grammar import GRAMMAR as VLLM
from servelab.errors import ServelabError

GRAMMARS: dict[Engine, Grammar] = {
    Engine.VLLM: VLLM,
    Engine.SGLANG: SGLANG,
    Engine.TRTLLM: TRTLLM,
    Engine.ATOM: ATOM,
}


def grammar_of(engine: Engine | str) -> Grammar:
    return GRAMMARS[engine_of(engine)]


def engine_of_argv(argv: list[str]) -> Engine:
    """The engine whose server program argv runs (the first one found, so `mpirun -n 1 trtllm-serve ...`
    and `env A=1 vllm serve ...` are read too)."""
    found = [(at[0], g.engine) for g in GRAMMARS.values() if (at := g.program_at(argv)) is not None]
    if not found:
        known = ", ".join(" ".join(p) for g in GRAMMARS.values() for p in reversed(g.programs))
        raise ServelabError(f"the server command is not {known}")
    return min(found)[1]


def parse(
    engine: Engine | str,
    argv: list[str],
    options: Mapping[str, Any] | None = None,
    fields: Collection[str] | None = None,
) -> ServerSettings:
    """The typed settings of a server command (see Grammar.parse)."""
    return grammar_of(engine).parse(argv, options, fields)


def render(engine: Engine | str, settings: ServerSettings) -> ServerCommand:
    """The server command of typed settings (see Grammar.render)."""
    return grammar_of(engine).render(settings)
