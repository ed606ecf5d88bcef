"""Read any supported recipe-side file: servelab recipes, InferenceX master YAML, perf-eval workload YAML."""

from __future__ import annotations

from pathlib import Path

from servelab.recipes.store import parse_recipe_file
from servelab.recipes.workload import is_workload, parse_workload, workload_to_recipe
from servelab.recipes.yamlio import read_yaml

# Workload files name no image; imports use this unless the caller gives one (validation warns: no digest).
DEFAULT_WORKLOAD_IMAGE = "vllm/vllm-openai:latest"


def load_any(path, registry, image: str | None = None):
    """(recipes by key, notes about the conversion)."""
    source = str(path)
    data = read_yaml(Path(path))
    notes: list[str] = []
    if is_workload(data):
        w = parse_workload(data, source)
        key, mapping = workload_to_recipe(
            w, registry.label_for_gpu(w.gpu), image or DEFAULT_WORKLOAD_IMAGE, source
        )
        notes.append(
            f"{source}: perf-eval workload {w.name!r} converted; serve_args parsed into typed fields"
        )
        if image is None:
            notes.append(f"workload files name no image and none was given; using {DEFAULT_WORKLOAD_IMAGE}")
        extra = mapping["engine"].get("extra-args")
        if extra:
            notes.append(f"flags without a typed field kept in engine.extra-args: {' '.join(extra)}")
        return parse_recipe_file({key: mapping}, source), notes
    return parse_recipe_file(data, source), notes
