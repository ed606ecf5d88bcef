"""Read any supported recipe-side file: servelab recipes, InferenceX master YAML, perf-eval workload YAML."""

from __future__ import annotations

from pathlib import Path

from servelab.recipes.recipe_store import parse_recipe_file
from servelab.recipes.workload import import_workload, is_workload, parse_workload
from servelab.recipes.yamlio import read_yaml


def load_any(path, runner_labels, image: str | None = None):
    """(recipes by key, notes about the conversion)."""
    source = str(path)
    data = read_yaml(Path(path))
    if is_workload(data):
        mappings, notes = import_workload(parse_workload(data, source), runner_labels, image, source)
        return parse_recipe_file(mappings, source), notes
    return parse_recipe_file(data, source), []
