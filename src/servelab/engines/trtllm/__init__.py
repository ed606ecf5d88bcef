"""TensorRT-LLM: its server command's grammar (`grammar`: flags and the extra_llm_api_options YAML), its
documented defaults (defaults.json) and its scheduler's policy (`policy`)."""

from servelab.engines.trtllm.grammar import GRAMMAR, OPTIONS_FILE

__all__ = ["GRAMMAR", "OPTIONS_FILE"]
