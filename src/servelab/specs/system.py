"""SystemSpec: one GPU system (memory, bandwidths, peak rates, interconnect, measured ceilings)."""

import json
from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict

from servelab.errors import ServelabError, closest

SYSTEMS_FILE = resources.files("servelab.specs") / "data" / "systems.json"


class Measured(BaseModel):
    value: float
    source: str
    what: str


class SystemSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    gpu_name: str
    sm_count: int  # streaming multiprocessors (NVIDIA) or compute units (AMD)
    compute_capability: int  # CUDA compute capability x 10 (90 Hopper, 100 Blackwell); 0 for non-NVIDIA GPUs
    arch: str = ""  # the GPU architecture where compute capability does not say it (AMD gfx942, gfx950)
    hbm_gib: float
    hbm_bw_tbs: float
    peak_tflops: dict[str, float]  # dense, per GPU, by compute class: bf16, fp8, fp4 (0 = not supported)
    power_w: float
    gpus_per_node: int
    nvlink_domain: int  # GPUs one NVLink domain spans (8 in an HGX node, 72 in an NVL72 rack)
    nvlink_gbs: float  # per GPU, one direction
    network_gbs: float  # per GPU, one direction
    l2_mb: float
    source: str
    measured: dict[str, Measured] = {}
    # roofline efficiencies that replace the shipped ones (perfdb/data/efficiencies.json) for a system fitted
    # elsewhere, a CPU say; {"tile_quantized": false} prices GEMMs without a GPU's 128-wide tiles
    efficiencies: dict[str, bool | float | dict[str, float]] = {}

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def supports_fp4(self) -> bool:
        return self.peak_tflops.get("fp4", 0) > 0

    @property
    def architecture(self) -> str:
        """How messages name the GPU generation: compute capability for NVIDIA, the gfx target for AMD."""
        if self.compute_capability:
            return f"compute capability {self.compute_capability / 10:.1f}"
        return self.arch

    @property
    def is_hopper(self) -> bool:
        return self.compute_capability == 90

    def ceiling(self, key: str, default: float) -> tuple[float, str]:
        """A measured ceiling when we have one, else the datasheet figure; with its provenance."""
        if key in self.measured:
            return self.measured[key].value, "measured"
        return default, "datasheet"

    def summary(self) -> dict:
        # a shipped system has no efficiencies of its own (efficiencies.json holds them): not shown empty
        dumped = self.model_dump(mode="json", exclude=set() if self.efficiencies else {"efficiencies"})
        return dumped | {"supports_fp4": self.supports_fp4}


@lru_cache(maxsize=1)
def _systems() -> dict[str, SystemSpec]:
    return {s["name"]: SystemSpec(**s) for s in json.loads(SYSTEMS_FILE.read_text())}


def list_systems() -> list[str]:
    return list(_systems())


def load_system(name: str) -> SystemSpec:
    key = name.strip().lower().replace("-", "_")
    systems = _systems()
    if key in systems:
        return systems[key]
    aliases = {
        "h200": "h200_sxm",
        "h100": "h100_sxm",
        "b200": "b200_sxm",
        "b300": "b300_sxm",
        "rtx6000pro": "rtx_pro_6000",  # InferenceX's runner name
    }
    if key in aliases:
        return systems[aliases[key]]
    raise ServelabError(
        f"unknown system {name!r}{closest(key, list(systems))}; `servelab systems` lists them"
    )
