"""Engines: everything servelab knows about vLLM, SGLang, TensorRT-LLM and ATOM, one package per engine.

`Engine` names them; `servelab.engines.argv` is the one command-line tokenizer every reader of a server
command goes through. Each engine's package owns its flag grammar, defaults, the kernels it runs by version
and its scheduling policy; the rest of servelab asks these packages and never spells an engine's flags itself.
"""

from collections.abc import Callable

from servelab.engines.kernels import KernelChoice
from servelab.engines.names import ENGINE_ALIASES, MODELLED, Engine, engine_of, is_engine
from servelab.engines.sglang.kv_cache import default_kv_dtype as sglang_kv_dtype
from servelab.engines.sglang.model_classes import MOE_FAMILY_BY_ARCHITECTURE as SGLANG_MOE_FAMILIES
from servelab.engines.vllm.kernels import KERNELS as VLLM_KERNELS
from servelab.engines.vllm.router import FLOAT32_ROUTER_ARCHITECTURES as VLLM_FLOAT32_ROUTERS
from servelab.specs.dtypes import Dtype
from servelab.specs.model import ModelSpec

# the kernels each engine picks by key, GPU and release, each timed in its own perf tables
# (engines/<name>/kernels.py)
KERNEL_CHOICES: dict[Engine, tuple[KernelChoice, ...]] = {Engine.VLLM: VLLM_KERNELS}


# the architectures whose MoE router GEMM each engine runs in float32 (engines/<name>/router.py). SGLang
# keeps MiniMax-M2's gate in float32 too (models/minimax_m2.py, 0.5.12 to 0.5.23) but turns TF32 on for it
# (arg_groups/model_overrides/minimax_m2.py, 0.5.23): tensor cores at half the bf16 rate, not priced here
FLOAT32_ROUTERS: dict[Engine, frozenset[str]] = {Engine.VLLM: VLLM_FLOAT32_ROUTERS}


# the KV-cache format each engine picks itself where the launch names none (engines/<name>/kv_cache.py); an
# engine not here, or a model its rule does not cover, keeps the checkpoint's
KV_DEFAULTS: dict[Engine, Callable[[ModelSpec, int], Dtype | None]] = {Engine.SGLANG: sglang_kv_dtype}


def engine_kv_dtype(engine: str, model: ModelSpec, compute_capability: int) -> Dtype | None:
    """The KV-cache format `engine` runs `model` in on a GPU of this compute capability where nothing names
    one (None: the checkpoint's own); a name that is not an engine (the torch backend) picks none."""
    pick = KV_DEFAULTS.get(engine_of(engine)) if is_engine(engine) else None
    return pick(model, compute_capability) if pick is not None else None


def with_engine_kv(model: ModelSpec, engine: str, compute_capability: int) -> ModelSpec:
    """`model` with the KV-cache format `engine` picks for it (engine_kv_dtype), for a launch that names
    none: callers pass a model whose KV format the user did not set."""
    kv = engine_kv_dtype(engine, model, compute_capability)
    if kv is None or kv == model.precision.kv_cache:
        return model
    return model.model_copy(update={"precision": model.precision.model_copy(update={"kv_cache": kv})})


# the architectures each engine runs through another family's MoE code (engines/<name>/model_classes.py)
MOE_FAMILIES: dict[Engine, dict[str, str]] = {Engine.SGLANG: SGLANG_MOE_FAMILIES}


def moe_code_family(engine: str, architecture: str) -> str | None:
    """The model family whose MoE code `engine` runs a model of this (Hugging Face) architecture with, where
    it is another family's; None: the model's own (or not known)."""
    return MOE_FAMILIES.get(engine_of(engine), {}).get(architecture) if is_engine(engine) else None


def kernel_choices(engine: Engine) -> tuple[KernelChoice, ...]:
    return KERNEL_CHOICES.get(engine, ())


def router_dtype(engine: Engine, architecture: str) -> Dtype:
    """The format `engine` runs the MoE router GEMM of a model of this (Hugging Face) architecture in."""
    return Dtype.fp32 if architecture in FLOAT32_ROUTERS.get(engine, ()) else Dtype.bf16


__all__ = [
    "ENGINE_ALIASES",
    "FLOAT32_ROUTERS",
    "KERNEL_CHOICES",
    "KV_DEFAULTS",
    "MOE_FAMILIES",
    "Engine",
    "KernelChoice",
    "MODELLED",
    "engine_kv_dtype",
    "engine_of",
    "is_engine",
    "kernel_choices",
    "moe_code_family",
    "router_dtype",
    "with_engine_kv",
]
