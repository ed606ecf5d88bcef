"""vLLM: its kernels by shape, GPU and release (kernels.py)."""
