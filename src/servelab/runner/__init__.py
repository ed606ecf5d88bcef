"""Running inference servers: a server process's lifecycle (`server`), and a local CPU vLLM with a tiny model
for checks that need a real engine (`vllm_cpu`, `tiny_llama`)."""
