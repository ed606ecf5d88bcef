"""Helpers shared by the op benchmarks: random inputs, fp8 quantization, trying kernel variants in order."""

from typing import Callable, NamedTuple


DEVICE = "cuda"  # tests of the op logic on the CPU set this to "cpu"


class Unsupported(Exception):
    """The op, shape or dtype has no faithful kernel on this GPU/software; the campaign records it and goes on."""


class Variant(NamedTuple):
    backend: str  # recorded in the row, e.g. "cudnn", "cublas_blockwise"
    make_inputs: Callable[[], tuple]
    run: Callable


def rand(*shape, dtype=None, scale: float = 1.0):
    """Random normal values, never all zeros (systems.md: zeros run faster than real data)."""
    import torch

    return (torch.randn(*shape, device=DEVICE, dtype=torch.float32) * scale).to(dtype or torch.bfloat16)


def rand_fp8(*shape):
    import torch

    return (torch.randn(*shape, device=DEVICE) * 0.5).to(torch.float8_e4m3fn)


def rand_scale(*shape):
    import torch

    return torch.rand(*shape, device=DEVICE, dtype=torch.float32) * 0.01 + 0.001


def first_working(variants: list[Variant]) -> Variant:
    """The first variant whose kernel runs once on real inputs; Unsupported (naming every failure) otherwise."""
    import torch

    failures = []
    for v in variants:
        try:
            out = v.run(*v.make_inputs())
            torch.cuda.synchronize()
            del out
            return v
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as e:  # noqa: BLE001 - a kernel refusing a shape raises assorted errors
            failures.append(f"{v.backend}: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
            torch.cuda.synchronize()
    raise Unsupported("; ".join(failures) or "no variant")


DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp8_block": 1}
