"""Engines: everything servelab knows about vLLM, SGLang and TensorRT-LLM, one package per engine.

`Engine` names them; `servelab.engines.argv` is the one command-line tokenizer every reader of a server
command goes through. Each engine's package owns its flag grammar, defaults, the kernels it runs by version
and its scheduling policy; the rest of servelab asks these packages and never spells an engine's flags itself.
"""

from servelab.engines.names import ENGINE_ALIASES, Engine, engine_of, is_engine

__all__ = ["ENGINE_ALIASES", "Engine", "engine_of", "is_engine"]
