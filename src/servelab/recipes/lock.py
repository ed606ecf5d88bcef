"""Recorded fingerprints: config key -> fingerprint of the key's full, unfiltered sweep."""

from __future__ import annotations

from servelab.recipes.filters import Filters
from servelab.recipes.fingerprint import sweep_fingerprint
from servelab.recipes.sweep import expand


def compute_fingerprints(store) -> dict[str, str]:
    out = {}
    for key in store.recipes:
        jobs = expand(store, [key], Filters(no_evals=True))
        out[key] = sweep_fingerprint([j.fingerprint for j in jobs])
    return out


def stale_keys(store) -> list[str]:
    """Keys whose recorded fingerprint differs from what they render to now (or that are missing)."""
    lock = store.lock() or {}
    current = compute_fingerprints(store)
    return sorted(k for k in set(current) | set(lock) if current.get(k) != lock.get(k))
