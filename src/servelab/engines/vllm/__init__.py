"""vLLM: its server command's grammar (`grammar`)."""

from servelab.engines.vllm.grammar import GRAMMAR

__all__ = ["GRAMMAR"]
