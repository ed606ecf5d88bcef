"""TensorRT-LLM: its server command's grammar (`grammar`: flags and the extra_llm_api_options YAML), its
documented defaults (defaults.json) and its scheduler's policy (`policy`)."""
