"""Helpers shared by the op benchmarks: random inputs, fp8 quantization, trying kernel variants in order."""

from collections.abc import Callable
from typing import NamedTuple

import torch

from servelab.collect.timing import CudaClock, _eager_estimate

DEVICE = "cuda"  # tests of the op logic on the CPU set this to "cpu"


class Unsupported(Exception):
    """The op, shape or dtype has no faithful kernel on this GPU/software; the campaign records it and goes
    on."""


class Variant(NamedTuple):
    backend: str  # recorded in the row, e.g. "cudnn", "cublas_blockwise"
    make_inputs: Callable[[], tuple]
    run: Callable


def rand(*shape, dtype=None, scale: float = 1.0):
    """Random normal values, never all zeros (all-zero inputs run faster than real data)."""
    return (torch.randn(*shape, device=DEVICE, dtype=torch.float32) * scale).to(dtype or torch.bfloat16)


def rand_fp8(*shape):
    return (torch.randn(*shape, device=DEVICE) * 0.5).to(torch.float8_e4m3fn)


def rand_scale(*shape):
    return torch.rand(*shape, device=DEVICE, dtype=torch.float32) * 0.01 + 0.001


def first_working(variants: list[Variant]) -> Variant:
    """The first variant whose kernel runs once on real inputs; Unsupported (naming every failure)
    otherwise."""
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
            failures.append(
                f"{v.backend}: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            )
            torch.cuda.synchronize()
    raise Unsupported("; ".join(failures) or "no variant")


DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp8_block": 1}


def fastest(variants: list[Variant]) -> Variant:
    """The variant with the shortest eager time on one input set (variants that fail are skipped)."""
    best, best_us = None, float("inf")
    for v in variants:
        try:
            us = _eager_estimate(v.run, [v.make_inputs()], CudaClock())
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            continue
        except Exception:  # noqa: BLE001 - a variant that cannot run this shape
            torch.cuda.synchronize()
            continue
        torch.cuda.empty_cache()
        if us < best_us:
            best, best_us = v, us
    if best is None:
        raise Unsupported("no variant ran: " + ", ".join(v.backend for v in variants))
    return best
