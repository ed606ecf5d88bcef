"""Engines: everything servelab knows about vLLM, SGLang, TensorRT-LLM and ATOM, one package per engine.

`Engine` names them; `servelab.engines.argv` is the one command-line tokenizer every reader of a server
command goes through. Each engine's package owns its flag grammar, defaults, the kernels it runs by version
and its scheduling policy; the rest of servelab asks these packages and never spells an engine's flags itself.
"""

from servelab.engines.kernels import KernelChoice
from servelab.engines.names import ENGINE_ALIASES, MODELLED, Engine, engine_of, is_engine
from servelab.engines.vllm.kernels import KERNELS as VLLM_KERNELS
from servelab.engines.vllm.router import FLOAT32_ROUTER_ARCHITECTURES as VLLM_FLOAT32_ROUTERS
from servelab.specs.dtypes import Dtype

# the kernels each engine picks by key, GPU and release, each timed in its own perf tables
# (engines/<name>/kernels.py)
KERNEL_CHOICES: dict[Engine, tuple[KernelChoice, ...]] = {Engine.VLLM: VLLM_KERNELS}


# the architectures whose MoE router GEMM each engine runs in float32 (engines/<name>/router.py). SGLang
# keeps MiniMax-M2's gate in float32 too (models/minimax_m2.py, 0.5.12 to 0.5.23) but turns TF32 on for it
# (arg_groups/model_overrides/minimax_m2.py, 0.5.23): tensor cores at half the bf16 rate, not priced here
FLOAT32_ROUTERS: dict[Engine, frozenset[str]] = {Engine.VLLM: VLLM_FLOAT32_ROUTERS}


def kernel_choices(engine: Engine) -> tuple[KernelChoice, ...]:
    return KERNEL_CHOICES.get(engine, ())


def router_dtype(engine: Engine, architecture: str) -> Dtype:
    """The format `engine` runs the MoE router GEMM of a model of this (Hugging Face) architecture in."""
    return Dtype.fp32 if architecture in FLOAT32_ROUTERS.get(engine, ()) else Dtype.bf16


__all__ = [
    "ENGINE_ALIASES",
    "FLOAT32_ROUTERS",
    "KERNEL_CHOICES",
    "Engine",
    "KernelChoice",
    "MODELLED",
    "engine_of",
    "is_engine",
    "kernel_choices",
    "router_dtype",
]
