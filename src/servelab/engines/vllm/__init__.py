"""vLLM: its documented defaults (defaults.json) and its scheduler's policy (policy.py)."""
