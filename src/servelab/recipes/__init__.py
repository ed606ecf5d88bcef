"""Recipes: typed serving recipes (schema.py), importers (inferencex.py, workload.py), engine adapters
(engines/), runners (runners.py), sweeps (ladder.py, sweep.py), fingerprints (fingerprint.py, lock.py), CI
output (pipelines.py) and the performance changelog (changelog.py). See docs/recipes.md."""
