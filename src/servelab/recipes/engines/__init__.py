"""Engine adapters: render a recipe arm into the exact launch argv, environment and config files.

One module per engine; each exposes `render(recipe, arm, max_model_len, port) -> Launch`. The registry below
picks the adapter from the recipe's `framework` (InferenceX's names included) and lists the choices when it is
unknown.
"""

from __future__ import annotations

from collections.abc import Callable

from servelab.errors import ServelabError, closest
from servelab.recipes.engines import sglang, trtllm, vllm
from servelab.recipes.engines.base import Launch

ENGINES: dict[str, Callable[..., Launch]] = {
    "vllm": vllm.render,
    "sglang": sglang.render,
    "trtllm": trtllm.render,
}
# InferenceX and users spell the frameworks several ways.
ALIASES = {"trt": "trtllm", "tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm", "sgl": "sglang"}


def engine_name(framework: str) -> str:
    name = ALIASES.get(framework, framework)
    if name not in ENGINES:
        raise ServelabError(
            f"servelab has no launch adapter for framework {framework!r} yet; adapters: {', '.join(ENGINES)}"
            + closest(framework, list(ENGINES) + list(ALIASES))
        )
    return name


def render(recipe, arm, max_model_len: int, port: int | None = None) -> Launch:
    """The launch of one arm of `recipe` (a servelab Recipe) at the given max model length."""
    if arm.disagg:
        raise ServelabError(
            "disaggregated (prefill/decode) arms are expanded into sweep rows "
            "but their launch is not rendered yet"
        )
    return ENGINES[engine_name(recipe.framework)](recipe, arm, max_model_len, port or recipe.client.port)


__all__ = ["ALIASES", "ENGINES", "Launch", "engine_name", "render"]
