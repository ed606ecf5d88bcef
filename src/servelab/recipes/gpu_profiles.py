"""perf-eval GPU profiles (vllm-project/perf-eval lib/gpu_profiles.yaml): what upstream's runner adds to a
workload per `gpu:` key, namely a base env the workload's own env is merged over, the Hugging Face cache
(HF_HOME), the image repository of the default image, and whether the server runs in docker or natively.

Upstream's parser reads the file at ../lib/gpu_profiles.yaml from the workload's directory; servelab does the
same, so a workload in a perf-eval checkout gets that checkout's profiles and an unknown `gpu:` is refused as
upstream refuses it. A workload elsewhere gets PERF_EVAL_PROFILES, servelab's record of upstream's profiles
at the pinned commit (tests/data/perf-eval/lib holds the file itself; a test holds the two equal), and a GPU
upstream has no profile for gets none (servelab serves GPUs perf-eval does not list).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from servelab.errors import ServelabError
from servelab.recipes.tokens import EnvName, ImageRef, Text

# The image repository of a profile without image_repo (upstream: CUDA images).
DEFAULT_REPO = "vllm/vllm-openai"
# The tag upstream's parser picks when neither VLLM_IMAGE, VLLM_COMMIT nor the workload names an image.
DEFAULT_TAG = "nightly"


def _env_value(v: object) -> object:
    """A value as upstream exports it into the server's env (its fmt(): True -> "True", None -> "None")."""
    if v is None:
        return "None"
    return str(v) if isinstance(v, (bool, int, float)) else v


EnvValue = Annotated[Text, BeforeValidator(_env_value)]


class GpuProfile(BaseModel):
    """One profile; the keys upstream's runner does not read here (queue, k8s_plugin) pass through."""

    model_config = ConfigDict(extra="allow")

    queue: Text | None = None
    hf_home: Text | None = Field(None, description="HF_HOME of the server unless the workload sets it.")
    image_repo: ImageRef | None = Field(None, description="Repository of the default image (ROCm).")
    server_runtime: Literal["docker", "native"] = "docker"
    env: dict[EnvName, EnvValue] | None = Field(None, description="Base env, under the workload's.")

    @property
    def repo(self) -> str:
        return (self.image_repo or "").strip() or DEFAULT_REPO


# Upstream's profiles at the pinned commit (bbd3fc711b8d), for workloads outside a perf-eval checkout.
PERF_EVAL_PROFILES: dict[str, dict] = {
    "H200": {"queue": "H200", "hf_home": "/mnt/shared/hf-models", "env": {"VLLM_DEEP_GEMM_WARMUP": "skip"}},
    "B200": {
        "queue": "b200-k8s",
        "hf_home": "/mnt/shared/hf_cache",
        "server_runtime": "native",
        "k8s_plugin": "nvidia",
        "env": {"VLLM_DEEP_GEMM_WARMUP": "skip", "NCCL_CUMEM_HOST_ENABLE": 0},
    },
    "MI300X": {
        "queue": "mi300_perf_eval",
        "image_repo": "vllm/vllm-openai-rocm",
        "server_runtime": "native",
        "k8s_plugin": "amd",
    },
    "MI355X": {
        "queue": "mi355_perf_eval",
        "image_repo": "vllm/vllm-openai-rocm",
        "server_runtime": "native",
        "k8s_plugin": "amd",
    },
}


def checkout_profiles_path(workload_path: str | os.PathLike) -> Path:
    """Where upstream's parser looks for the profiles: lib/ beside the workload's directory (the path made
    absolute, not resolved through symlinks, as upstream's os.path.abspath does)."""
    return (
        Path(os.path.dirname(os.path.dirname(os.path.abspath(workload_path)))) / "lib" / "gpu_profiles.yaml"
    )


def parse_profiles(data: object, source: str) -> dict[str, GpuProfile]:
    if not isinstance(data, dict):
        raise ServelabError(f"{source}: expected a mapping of GPU names to profiles")
    try:
        return {str(gpu): GpuProfile.model_validate(p or {}) for gpu, p in data.items()}
    except ValidationError as e:
        raise ServelabError.from_validation(e, source) from None


def profile_for(gpu: str, workload_path: str | os.PathLike | None = None) -> tuple[GpuProfile, str]:
    """(the profile of `gpu`, where it came from): the checkout's file beside the workload when there is one
    (an unknown GPU refused, as upstream refuses it), else servelab's record of upstream's profiles."""
    path = checkout_profiles_path(workload_path) if workload_path is not None else None
    if path is not None and path.is_file():
        try:
            profiles = parse_profiles(yaml.safe_load(path.read_text()), str(path))
        except yaml.YAMLError as e:
            raise ServelabError(f"{path}: not YAML ({e})".splitlines()[0]) from None
        if gpu not in profiles:
            raise ServelabError(f"unknown gpu {gpu!r} in {path} (have {', '.join(profiles)})", field="gpu")
        return profiles[gpu], str(path)
    shipped = parse_profiles(PERF_EVAL_PROFILES, "servelab's perf-eval GPU profiles")
    if gpu in shipped:
        return shipped[gpu], "servelab's record of perf-eval's lib/gpu_profiles.yaml"
    return GpuProfile(), "none (perf-eval has no profile for this GPU)"
