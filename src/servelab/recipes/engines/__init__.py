"""Engine adapters: render a recipe arm into the exact launch argv, environment and config files.

One module per engine; each exposes `render(recipe, arm, max_model_len, port) -> Launch`. The registry below picks
the adapter from the recipe's `framework` (InferenceX's names included) and lists the choices when it is unknown.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from servelab.errors import ServelabError, closest


class Launch(BaseModel):
    """What starts one server: argv (never a shell string), environment, and files written next to it."""

    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict, description="relative path -> content")
    port: int
    health_path: str = "/health"


def _vllm(*a, **k):
    from servelab.recipes.engines import vllm

    return vllm.render(*a, **k)


def _sglang(*a, **k):
    from servelab.recipes.engines import sglang

    return sglang.render(*a, **k)


def _trtllm(*a, **k):
    from servelab.recipes.engines import trtllm

    return trtllm.render(*a, **k)


ENGINES: dict[str, Callable[..., Launch]] = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}
# InferenceX and users spell the frameworks several ways.
ALIASES = {"trt": "trtllm", "tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm", "sgl": "sglang"}


def engine_name(framework: str) -> str:
    name = ALIASES.get(framework, framework)
    if name not in ENGINES:
        raise ServelabError(
            f"framework {framework!r} has no engine adapter; expected one of {', '.join(ENGINES)}"
            + closest(framework, list(ENGINES) + list(ALIASES))
        )
    return name


def render(recipe, arm, max_model_len: int, port: int | None = None) -> Launch:
    """The launch of one arm of `recipe` (a servelab Recipe) at the given max model length."""
    if arm.disagg:
        raise ServelabError(
            "disaggregated (prefill/decode) arms are expanded into sweep rows but their launch is not rendered yet"
        )
    return ENGINES[engine_name(recipe.framework)](recipe, arm, max_model_len, port or recipe.client.port)


def base_env(recipe) -> dict[str, str]:
    """Recipe env plus typed pins (CUDA_HOME), sorted so the fingerprint is stable."""
    env = dict(recipe.env)
    if recipe.engine.cuda_home:
        env["CUDA_HOME"] = recipe.engine.cuda_home
    return dict(sorted(env.items()))


def refuse(engine: str, recipe, fields: list[str]) -> None:
    """Raise for typed engine fields this engine cannot express, rather than silently dropping them."""
    dumped = recipe.engine.dump()
    bad = [f for f in fields if dumped.get(f) not in (None, [], {})]
    if bad:
        raise ServelabError(
            f"engine.{bad[0]}: not supported by the {engine} adapter (set on recipe for {engine})"
        )


def json_arg(value) -> str:
    import json

    return json.dumps(value, sort_keys=True, separators=(",", ":"))
