"""Engine adapters: render a recipe arm into the exact launch argv, environment and config files.

One module per engine; each exposes `render(recipe, arm, max_model_len, port, extra) -> Launch`, where `extra`
is what InferenceX's launch script for the recipe's key adds (profiles.py). The registry below picks the
adapter from the recipe's `framework` (InferenceX's names included) and lists the choices when it is unknown.
"""

from __future__ import annotations

from collections.abc import Callable

from servelab.errors import ServelabError, closest
from servelab.recipes.engines import sglang, trtllm, vllm
from servelab.recipes.engines.base import Launch
from servelab.recipes.engines.profiles import Extras, JobPoint, profile_for

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


def render(recipe, arm, max_model_len: int, port: int | None = None, job: JobPoint | None = None) -> Launch:
    """The launch of one arm of `recipe` (a servelab Recipe) at the given max model length, for one job
    (sequence lengths and concurrency, on which upstream's launch flags may depend)."""
    if arm.disagg:
        raise ServelabError(
            "disaggregated (prefill/decode) arms are expanded into sweep rows "
            "but their launch is not rendered yet"
        )
    name = engine_name(recipe.framework)
    profile = profile_for(recipe, arm, name)
    extra = profile.resolve(arm, job or JobPoint(), recipe.model) if profile else Extras()
    return ENGINES[name](recipe, arm, max_model_len, port or recipe.client.port, extra)


__all__ = ["ALIASES", "ENGINES", "JobPoint", "Launch", "engine_name", "render"]
