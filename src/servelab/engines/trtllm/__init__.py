"""TensorRT-LLM: its server command's grammar (`grammar`: flags and the extra_llm_api_options YAML), its
documented defaults (defaults.json), its scheduler's policy (`policy`) and the MoE backend it runs by expert
format and GPU (`moe`)."""
