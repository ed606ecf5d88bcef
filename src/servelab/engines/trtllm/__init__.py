"""TensorRT-LLM: its server command's grammar (`grammar`), flags and extra_llm_api_options YAML."""

from servelab.engines.trtllm.grammar import GRAMMAR, OPTIONS_FILE

__all__ = ["GRAMMAR", "OPTIONS_FILE"]
