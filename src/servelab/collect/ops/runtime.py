"""What a GPU worker process does before its first op: pick its GPU and set the math modes the engines use."""

import datetime
import gc
import os
from importlib.metadata import PackageNotFoundError, version

import torch
import torch.distributed as dist

from servelab.collect.ops.common import Unsupported


def init_worker(device_index: int) -> None:
    torch.cuda.set_device(device_index)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(1234 + device_index)


def classify(exc: BaseException) -> str:
    """The error class recorded in errors.jsonl."""
    name = type(exc).__name__
    text = str(exc).lower()
    if name == "OutOfMemoryError" or "out of memory" in text:
        return "oom"
    if (
        isinstance(exc, (Unsupported, NotImplementedError))
        or "not supported" in text
        or "no available kernel" in text
    ):
        return "unsupported"
    if isinstance(exc, FloatingPointError):
        return "nan_output"
    if (
        "illegal memory access" in text
        or "device-side assert" in text
        or "unspecified launch failure" in text
    ):
        return "cuda_fatal"
    return "error"


def after_error() -> None:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def init_comm(rank: int, world: int, port: int, sizes) -> dict:
    """One NCCL process group over all local GPUs, and a subgroup for each collective size measured."""
    # NVLink multicast was off where the H200 campaigns ran: keep it off in every process we start
    for var, value in (
        ("NCCL_NVLS_ENABLE", "0"),
        ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
        ("NVSHMEM_DISABLE_NVLS", "1"),
    ):
        os.environ.setdefault(var, value)
    init_worker(rank)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
        device_id=torch.device("cuda", rank),
    )
    groups = {}
    for g in sorted(set(sizes)):
        groups[g] = dist.new_group(ranks=list(range(g))) if g < world else dist.group.WORLD
    return groups


def barrier() -> None:
    dist.barrier()


def close_comm() -> None:
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def facts() -> dict:
    props = torch.cuda.get_device_properties(0)
    nccl = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else None
    return {
        "gpu_name": torch.cuda.get_device_name(0),
        "gpu_count": torch.cuda.device_count(),
        "sm_count": props.multi_processor_count,
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "l2_mb": round(getattr(props, "L2_cache_size", 0) / 1e6, 1),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl,
        "triton": _version("triton"),
    }


def _version(name: str):
    try:
        return version(name)
    except PackageNotFoundError:
        return None
