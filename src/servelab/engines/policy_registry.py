"""Which scheduling policy each engine follows (one class per engine, in its package), and the kernels-only
`torch` pseudo-backend's (the base class: decode-first chunked prefill)."""

from __future__ import annotations

from servelab.engines.names import Engine, engine_of, is_engine
from servelab.engines.policy import KERNELS_ONLY, SchedulingPolicy
from servelab.engines.sglang.policy import SglangPolicy
from servelab.engines.trtllm.policy import TrtllmPolicy
from servelab.engines.vllm.policy import VllmPolicy
from servelab.registry import Registry

POLICIES: Registry[type[SchedulingPolicy]] = Registry(
    "engine",
    {
        Engine.VLLM.value: VllmPolicy,
        Engine.SGLANG.value: SglangPolicy,
        Engine.TRTLLM.value: TrtllmPolicy,
        KERNELS_ONLY: SchedulingPolicy,
    },
)


def policy_for(backend: Engine | str) -> SchedulingPolicy:
    """The scheduling policy of an engine (any spelling of its name) or of the `torch` backend, with its
    documented defaults; one line listing the known names otherwise."""
    name = engine_of(backend).value if is_engine(backend) else str(backend)
    return POLICIES.get(name)()
