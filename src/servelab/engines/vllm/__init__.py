"""vLLM: its server command's grammar (`grammar`) and the kernels it picks by shape, GPU and release
(`kernels`)."""

from servelab.engines.vllm.grammar import GRAMMAR

__all__ = ["GRAMMAR"]
