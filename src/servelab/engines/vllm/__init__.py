"""vLLM: its server command's grammar (`grammar`), the kernels it picks by shape, GPU and release
(`kernels`), the flags each release accepts (`releases/`), its documented defaults (defaults.json), its step
budget and sequence cap by GPU and release (`batch`, batch_defaults.json) and its scheduler's policy
(`policy`)."""
