"""What one rank of a T-way tensor-parallel attention + expert-parallel MoE split holds, from a model's
config.json: pure Python, shared by accuracy/gpu_tp_step_check.py (which builds the rank on a GPU) and
accuracy/compare_step_check.py (which checks the op graph prices the same shapes).

The split is vLLM's with --tensor-parallel-size T --enable-expert-parallel: query heads over T ranks; KV
heads over T ranks when there are at least T of them, else replicated (each rank holds one, T / kv ranks
share it); experts over T ranks, rank r holding the consecutive block r x E / T ...; the LM head's vocabulary
over T ranks. Both config spellings are read: Qwen3-MoE's (num_experts, moe_intermediate_size) and
MiniMax-M2's (num_local_experts, intermediate_size as the expert width).
"""

import json
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
# The configs the GPU checks build, by name; paths relative to the repository root (the JSON results carry
# them, so the comparison prices the same file)
MODEL_CONFIGS = {
    "qwen3-235b-a22b": "src/servelab/specs/data/models/qwen3-235b-a22b.json",
    "minimax-m2.5": "tests/data/closed_loop/aiconfigurator/minimax-m2.5/config.json",
}


class ShardDims(NamedTuple):
    hidden: int
    head_dim: int
    heads: int  # query heads on this rank
    kv_heads: int  # KV heads on this rank (a replicated one counts once)
    experts: int  # experts on this rank
    total_experts: int
    first_expert: int  # global id of this rank's first expert
    topk: int
    inter: int  # one expert's intermediate width (not split: experts are split by EP, not by TP)
    vocab: int  # the whole vocabulary (the embedding table)
    vocab_local: int  # LM-head rows on this rank
    rotary_dim: int  # leading dims of each head that rotary embedding turns (MiniMax-M2: 64 of 128)
    scoring: str  # router scores: softmax (Qwen3) or sigmoid with a correction bias (MiniMax-M2)
    qk_norm: str  # per_head (Qwen3: over head_dim) or per_layer (MiniMax-M2: over the whole q / k projection)


def read_config(model: str) -> dict:
    if model not in MODEL_CONFIGS:
        raise SystemExit(f"--model: expected one of {', '.join(MODEL_CONFIGS)}, got {model!r}")
    return json.loads((ROOT / MODEL_CONFIGS[model]).read_text())


def shard_dims(cfg: dict, world: int, rank: int = 0) -> ShardDims:
    """Rank `rank` of a `world`-way TP + EP split; ValueError when the split does not divide the model."""
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    experts = cfg.get("num_experts") or cfg["num_local_experts"]
    inter = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not one of {world} ranks")
    if heads % world:
        raise ValueError(f"{heads} query heads do not divide over {world} ranks")
    if (kv >= world and kv % world) or (kv < world and world % kv):
        raise ValueError(f"{kv} KV heads neither divide over nor replicate evenly on {world} ranks")
    if experts % world:
        raise ValueError(f"{experts} experts do not divide over {world} ranks")
    local = experts // world
    return ShardDims(
        hidden=cfg["hidden_size"],
        head_dim=head_dim,
        heads=heads // world,
        kv_heads=max(1, kv // world),
        experts=local,
        total_experts=experts,
        first_expert=rank * local,
        topk=cfg["num_experts_per_tok"],
        inter=inter,
        vocab=cfg["vocab_size"],
        vocab_local=-(-cfg["vocab_size"] // world),
        rotary_dim=cfg.get("rotary_dim") or head_dim,
        scoring=cfg.get("scoring_func") or "softmax",
        qk_norm="per_layer" if cfg.get("qk_norm_type") == "per_layer" else "per_head",
    )
