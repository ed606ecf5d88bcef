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
from servelab.recipes.engines import atom, sglang, trtllm, vllm
from servelab.recipes.engines.base import Deployment, Launch, NodeProcess, Role
from servelab.recipes.engines.profiles import AGENTIC, Extras, JobPoint, hardware_of, profile_for

ENGINES: dict[Engine, Callable[..., Launch]] = {
    Engine.VLLM: vllm.render,
    Engine.SGLANG: sglang.render,
    Engine.TRTLLM: trtllm.render,
    Engine.ATOM: atom.render,
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
    max_model_len: int | None,
    port: int | None = None,
    job: JobPoint | None = None,
    extra: Extras | None = None,
) -> Launch:
    """The launch of one arm of `recipe` (a servelab Recipe) at the given max model length, for one job
    (sequence lengths and concurrency, on which upstream's launch flags may depend). `extra`: what upstream's
    launch script adds, when it does not come from the shipped profile (a script of the user's checkout).
    An agentic-coding job (`job.scenario`) has no max model length (None: the model's native context, as
    upstream's agentic scripts run it) and renders only from what its script launched: without a profile, or
    where the script launched no server for it, it has no launch."""
    if arm.disagg:
        raise ServelabError(
            "disaggregated (prefill/decode) arms are expanded into sweep rows "
            "but their launch is not rendered yet"
        )
    engine = engine_name(recipe.framework)
    job = job or JobPoint()
    profile = None
    if extra is None:
        profile = profile_for(recipe, arm, engine, job.scenario)
        extra = profile.resolve(arm, job, recipe.model) if profile else Extras()
    if job.scenario == AGENTIC and profile is None and extra == Extras():
        raise ServelabError(
            f"agentic-coding: servelab has no launch captured from upstream's agentic script for "
            f"{recipe.model_prefix} {recipe.precision} {hardware_of(recipe.runner)} {recipe.framework} "
            f"spec-decoding {arm.spec_}"
        )
    if extra.refused:
        script = f" {profile.script}" if profile else ""
        raise ServelabError(
            f"agentic-coding: upstream's script{script} launches no server for this job under servelab's "
            f"stub servers: {extra.refused}"
        )
    return ENGINES[engine](recipe, arm, max_model_len, port or recipe.client.port, extra)


__all__ = [
    "ENGINES",
    "Deployment",
    "Extras",
    "JobPoint",
    "Launch",
    "NodeProcess",
    "Role",
    "engine_name",
    "render",
]
