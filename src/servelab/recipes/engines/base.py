"""What every engine adapter builds on: the Launch it returns and the pieces all adapters share."""

from __future__ import annotations

from pydantic import BaseModel, Field

from servelab.engines.grammar import json_arg
from servelab.engines.names import Engine
from servelab.errors import ServelabError


class Launch(BaseModel):
    """What starts one server: argv (never a shell string), environment, and files written next to it."""

    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict, description="relative path -> content")
    port: int
    health_path: str = "/health"


def base_env(recipe, profile_env: dict[str, str] | None = None) -> dict[str, str]:
    """Upstream's launch-profile env, then the recipe env and typed pins (CUDA_HOME) over it, sorted so the
    fingerprint is stable."""
    env = {**(profile_env or {}), **recipe.env}
    if recipe.engine.cuda_home:
        env["CUDA_HOME"] = recipe.engine.cuda_home
    return dict(sorted(env.items()))


def refuse(engine: Engine, recipe, fields: list[str]) -> None:
    """Raise for typed engine fields this engine cannot express, rather than silently dropping them."""
    dumped = recipe.engine.dump()
    bad = [f for f in fields if dumped.get(f) not in (None, [], {})]
    if bad:
        raise ServelabError(
            f"engine.{bad[0]}: not supported by the {engine} adapter (set on recipe for {engine})"
        )


__all__ = ["Launch", "base_env", "json_arg", "refuse"]
