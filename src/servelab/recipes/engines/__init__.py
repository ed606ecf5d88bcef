"""Engine adapters: render a recipe arm into the exact launch argv, environment and config files.

One module per engine; each turns the recipe's typed fields and the arm's layout into typed server settings
(`servelab.engines.ServerSettings`), renders them through the engine's grammar and applies `extra`, what
InferenceX's launch script for the recipe's key adds (profiles.py). The registry below picks the adapter from
the recipe's `framework` (InferenceX's names included) and lists the choices when it is unknown.
"""

from __future__ import annotations

from collections.abc import Callable

from servelab.engines.names import Engine, engine_of, is_engine
from servelab.errors import ServelabError, closest
from servelab.recipes.engines import sglang, trtllm, vllm
from servelab.recipes.engines.base import Launch
from servelab.recipes.engines.profiles import Extras, JobPoint, profile_for

ENGINES: dict[Engine, Callable[..., Launch]] = {
    Engine.VLLM: vllm.render,
    Engine.SGLANG: sglang.render,
    Engine.TRTLLM: trtllm.render,
}


def engine_name(framework: str) -> Engine:
    """The engine a recipe's framework names (InferenceX's `trt` included)."""
    if not is_engine(framework) or engine_of(framework) not in ENGINES:
        known = [str(e) for e in ENGINES]
        raise ServelabError(
            f"servelab has no launch adapter for framework {framework!r} yet; adapters: {', '.join(known)}"
            + closest(framework, known + ["trt"])
        )
    return engine_of(framework)


def render(
    recipe,
    arm,
    max_model_len: int,
    port: int | None = None,
    job: JobPoint | None = None,
    extra: Extras | None = None,
) -> Launch:
    """The launch of one arm of `recipe` (a servelab Recipe) at the given max model length, for one job
    (sequence lengths and concurrency, on which upstream's launch flags may depend). `extra`: what upstream's
    launch script adds, when it does not come from the shipped profile (a script of the user's checkout)."""
    if arm.disagg:
        raise ServelabError(
            "disaggregated (prefill/decode) arms are expanded into sweep rows "
            "but their launch is not rendered yet"
        )
    engine = engine_name(recipe.framework)
    if extra is None:
        profile = profile_for(recipe, arm, engine)
        extra = profile.resolve(arm, job or JobPoint(), recipe.model) if profile else Extras()
    return ENGINES[engine](recipe, arm, max_model_len, port or recipe.client.port, extra)


__all__ = ["ENGINES", "Extras", "JobPoint", "Launch", "engine_name", "render"]
