"""Engine profiles: what an engine adds to the kernel time of a step (scheduling, sampling, launch gaps,
CUDA graphs for decode), and its documented scheduler defaults."""

import json
from functools import cache
from importlib import resources

from pydantic import BaseModel, ConfigDict

from servelab.errors import ServelabError, closest

ENGINE_NAMES = ("torch", "vllm", "sglang", "trtllm")  # torch: kernels alone, no engine overhead


class EngineProfile(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    step_overhead_us: float  # CPU time per step the GPU waits for (schedule, prepare inputs, sample)
    per_seq_overhead_us: float  # per running sequence per step
    kernel_gap_us: float  # idle time between kernels inside a CUDA graph
    eager_launch_us: float  # CPU launch cost per kernel outside graphs (hidden when kernels are longer)
    cuda_graph_max_batch: int  # decode steps up to this batch replay a CUDA graph
    max_num_batched_tokens: int
    max_num_seqs: int
    chunked_prefill: bool
    kernel_band_low: float = 1.0  # step-level structure error of the kernel sum (measured, engines.json)
    kernel_band_high: float = 1.0
    source: str = "documented defaults"

    def overhead_us(self, num_seqs: int) -> float:
        return self.step_overhead_us + self.per_seq_overhead_us * num_seqs


@cache
def _profiles() -> dict:
    base = resources.files("servelab.predict") / "data"
    data = json.loads((base / "engines.json").read_text())
    calibrated = base / "calibrated.json"
    fitted = json.loads(calibrated.read_text()) if calibrated.is_file() else {}
    band = data.get("step_structure_band", {})
    profiles = {}
    for name in ENGINE_NAMES:
        fields = dict(
            data[name], kernel_band_low=band.get("low", 1.0), kernel_band_high=band.get("high", 1.0)
        )
        source = "documented defaults"
        if name in fitted.get("engines", {}):
            fields.update(fitted["engines"][name]["params"])
            source = f"calibrated ({fitted.get('_provenance', 'servelab calibrate engines')})"
        profiles[name] = EngineProfile(name=name, source=source, **fields)
    return profiles


def engine_profile(name: str, **overrides) -> EngineProfile:
    profiles = _profiles()
    if name not in profiles:
        raise ServelabError(
            f"unknown engine {name!r}{closest(name, list(profiles))}; "
            f"expected one of {', '.join(ENGINE_NAMES)}",
            field="backend",
        )
    profile = profiles[name]
    overrides = {k: v for k, v in overrides.items() if v is not None}
    return profile.model_copy(update=overrides) if overrides else profile
