"""What every engine adapter builds on: the Launch it returns and the pieces all adapters share."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, field_validator

from servelab.engines.grammar import json_arg
from servelab.engines.names import Engine
from servelab.errors import ServelabError


class Launch(BaseModel):
    """What starts one server: argv (never a shell string), environment, and files written next to it."""

    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict, description="relative path -> content")
    port: int
    health_path: str = "/health"

    @field_validator("files")
    @classmethod
    def _files_stay_in_the_run_folder(cls, v: dict[str, str]) -> dict[str, str]:
        for path in v:
            check_launch_file(path)
        return v


# a segment of a launch file's path: a plain name (no `..`, no `~`, no backslash, no control character)
_SEGMENT = re.compile(r"[A-Za-z0-9_+=@,-][A-Za-z0-9._+=@,-]*")
MAX_PATH = 1024


def check_launch_file(path: str) -> str:
    """A file a launch writes is a relative path of plain names, so it lands in the run folder (or the
    container's working directory) whatever writes it: never absolute, never `..`, `~` or a backslash."""
    segments = path.split("/")
    if len(path) > MAX_PATH or not all(_SEGMENT.fullmatch(s) for s in segments):
        raise ValueError(
            f"{path!r} is not a relative path of plain names inside the run folder "
            "(no leading /, no .. or ~, letters, digits and ._+=@,- only)"
        )
    return path


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


__all__ = ["Launch", "base_env", "check_launch_file", "json_arg", "refuse"]
