"""The engines servelab knows, by one name each, and the other spellings users and upstream files use."""

from __future__ import annotations

from enum import StrEnum

from servelab.errors import ServelabError, closest


class Engine(StrEnum):
    """A serving engine. Adding one means adding its package under servelab/engines (flag grammar, defaults,
    kernels by version, scheduling policy) and a member here."""

    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"
    ATOM = "atom"  # AMD's ROCm engine: launched (grammar, recipe adapter), not priced (see MODELLED)


# The engines servelab's performance model prices (defaults, scheduling policy, kernels, collect catalogues,
# calibration, the twin). The others are launched only: recipes render and validate their launches.
MODELLED: tuple[Engine, ...] = (Engine.VLLM, Engine.SGLANG, Engine.TRTLLM)


# Other spellings of an engine's name: InferenceX's `framework` values (`trt`), the projects' own names and
# the short forms users type.
ENGINE_ALIASES: dict[str, Engine] = {
    "trt": Engine.TRTLLM,
    "tensorrt-llm": Engine.TRTLLM,
    "tensorrt_llm": Engine.TRTLLM,
    "sgl": Engine.SGLANG,
}


def engine_of(name: str, field: str | None = None) -> Engine:
    """The engine a name (any spelling, any case) stands for; one line listing the engines otherwise."""
    key = str(name).strip().lower()
    if key in ENGINE_ALIASES:
        return ENGINE_ALIASES[key]
    try:
        return Engine(key)
    except ValueError:
        known = [e.value for e in Engine]
        hint = closest(key, known + list(ENGINE_ALIASES))
        raise ServelabError(
            f"unknown engine {name!r}{hint}; engines: {', '.join(known)}",
            field=field,
        ) from None


def is_engine(name: str) -> bool:
    """Whether a name (any spelling) is an engine servelab knows."""
    key = str(name).strip().lower()
    return key in ENGINE_ALIASES or key in Engine._value2member_map_
