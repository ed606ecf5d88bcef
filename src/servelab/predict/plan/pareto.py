"""The Pareto frontier of throughput per GPU against tokens/s per user (both higher is better)."""

from __future__ import annotations


def pareto_mask(points: list[tuple[float, float]]) -> list[bool]:
    """True where no other point is at least as good on both axes and better on one. O(n log n)."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    mask = [False] * len(points)
    best_y = float("-inf")
    for i in order:
        if points[i][1] > best_y:
            mask[i] = True
            best_y = points[i][1]
    return mask
