"""Which fused_moe_kernel config vLLM picks for one MoE layer, as fused_moe.py's try_get_optimal_moe_config
does it: the wheel's tuned table for (local experts, intermediate per rank, device, dtype, block) at the
nearest batch, else its get_default_config. Kept free of torch so the rule is checked without a GPU.

A key's dtype says how vLLM quantises the experts: block-FP8 (w8a8, 128 x 128 weight blocks: the tables are
named `dtype=fp8_w8a8,block_shape=[128,128]`) or bf16 (unquantised: `dtype` None, tables named without a
dtype or block).
"""

import json
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple


class Quant(NamedTuple):
    """How fused_experts_impl is called for a key's dtype."""

    config_dtype: str | None  # the `dtype` of try_get_optimal_moe_config and its file names
    block: list[int] | None  # the weights' quantisation block (n, k), or None
    use_fp8_w8a8: bool


QUANT = {
    "fp8_block": Quant("fp8_w8a8", [128, 128], True),
    "bf16": Quant(None, None, False),
}


def config_file_name(experts: int, n: int, device_name: str, quant: Quant) -> str:
    """The tuned table's file name (get_config_file_name's rule; the H200 variants share one)."""
    if "H200" in device_name.split("_"):
        device_name = "NVIDIA_H200"
    dtype = f",dtype={quant.config_dtype}" if quant.config_dtype else ""
    block = f",block_shape=[{quant.block[0]},{quant.block[1]}]" if quant.block and all(quant.block) else ""
    return f"E={experts},N={n},device_name={device_name}{dtype}{block}.json"


def tuned_table(config_dir: Path, name: str) -> dict[int, dict] | None:
    path = config_dir / name
    if not path.exists():
        return None
    table = json.loads(path.read_text())
    table.pop("triton_version", None)
    return {int(k): v for k, v in table.items()}


def pick_config(
    config_dir: Path,
    default_config: Callable[..., dict],
    device_name: str,
    quant: Quant,
    *,
    tokens: int,
    experts: int,
    n: int,
    hidden: int,
    topk: int,
) -> tuple[dict, str]:
    """(config, where it came from: the tuned file's name or "default") for `tokens` tokens on `experts`
    local experts of width n; default_config is the wheel's get_default_config(M, E, N, K, topk, dtype,
    block_shape)."""
    name = config_file_name(experts, n, device_name, quant)
    table = tuned_table(config_dir, name)
    if table:
        return dict(table[min(table, key=lambda m: abs(m - tokens))]), name
    return dict(default_config(tokens, experts, n, hidden, topk, quant.config_dtype, quant.block)), "default"
