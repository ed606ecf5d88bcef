"""Engines: everything servelab knows about vLLM, SGLang, TensorRT-LLM and ATOM, one package per engine.

`Engine` names them; `servelab.engines.argv` is the one command-line tokenizer every reader of a server
command goes through. Each engine's package owns its flag grammar, defaults, the kernels it runs by version
and its scheduling policy; the rest of servelab asks these packages and never spells an engine's flags itself.
"""

from servelab.engines.kernels import KernelChoice
from servelab.engines.names import ENGINE_ALIASES, MODELLED, Engine, engine_of, is_engine
from servelab.engines.vllm.kernels import KERNELS as VLLM_KERNELS

# the kernels each engine picks by key, GPU and release, each timed in its own perf tables
# (engines/<name>/kernels.py)
KERNEL_CHOICES: dict[Engine, tuple[KernelChoice, ...]] = {Engine.VLLM: VLLM_KERNELS}


def kernel_choices(engine: Engine) -> tuple[KernelChoice, ...]:
    return KERNEL_CHOICES.get(engine, ())


__all__ = [
    "ENGINE_ALIASES",
    "KERNEL_CHOICES",
    "Engine",
    "KernelChoice",
    "MODELLED",
    "engine_of",
    "is_engine",
    "kernel_choices",
]
