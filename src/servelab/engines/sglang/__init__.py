"""SGLang: its server command's grammar (`grammar`)."""

from servelab.engines.sglang.grammar import GRAMMAR

__all__ = ["GRAMMAR"]
