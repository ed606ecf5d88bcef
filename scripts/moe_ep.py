"""Expert parallelism as vLLM lays it out on one rank (no torch here, so tests read it without a GPU):
which experts a rank holds, how wide they are, and the expert map that sends other ranks' experts to -1.
Imported by scripts/time_vllm_fused_moe.py as a sibling module (it runs on a GPU machine with nothing of
servelab installed); tests/perfdb/test_kernel_tables.py imports it the same way, in a python whose path holds
scripts/."""

from collections.abc import Iterator, Mapping


def rank_shape(experts: int, inter_full: int, tp: int, ep: int) -> tuple[int, int] | None:
    """(local experts, local width) of one rank at TP tp with expert parallelism ep inside it (vLLM's TEP: the
    tp ranks form the EP group; the MoE weights are split tp / ep ways, so at ep = tp each rank holds whole
    experts); None where ep does not divide tp or the experts, or tp / ep does not divide the width."""
    if ep < 1 or tp % ep or experts % ep or inter_full % (tp // ep):
        return None
    return experts // ep, inter_full // (tp // ep)


def expert_map(experts: int, ep: int, rank: int = 0) -> list[int]:
    """vLLM's "linear" placement (determine_expert_map in fused_moe/layer.py): global expert -> its index
    on `rank`, -1 where another rank holds it."""
    local = experts // ep
    first = rank * local
    return [e - first if first <= e < first + local else -1 for e in range(experts)]


def rank_grid(
    shapes: Mapping[str, tuple[int, int, int, int]], names: list[str], tps: list[int], eps: list[int]
) -> Iterator[tuple[str, int, int, int, int]]:
    """(model, tp, ep, local experts, local width) of each rank shape to time, model then tp then ep (the old
    runs' order, ep innermost); shapes maps a model to (experts, top-k, hidden, intermediate before any
    split). A split that does not exist is said and skipped."""
    for model in names:
        experts, _, _, inter_full = shapes[model]
        for tp in tps:
            for ep in eps:
                shape = rank_shape(experts, inter_full, tp, ep)
                if shape is None:
                    print(f"skipped {model} tp{tp} ep{ep}: ep must divide tp, the experts and the width")
                    continue
                yield (model, tp, ep, *shape)
