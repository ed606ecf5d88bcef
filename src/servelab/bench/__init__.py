"""servelab's load generator (`servelab bench`): a drop-in for `vllm bench serve` that is never the bottleneck.

Modules, one job each:
  config      BenchConfig, the typed form of every flag (validated once)
  tokenizer   optional local tokenizer (tokenizers / transformers) for exact prompt lengths
  datasets    random, sharegpt, prefix (prefix_repetition), multiturn, custom -> BenchItem list
  schedule    arrival offsets from the seed (gamma gaps, ramp-up), computed up front
  payload     pre-serialized HTTP requests for /v1/completions and /v1/chat/completions
  client      the streaming HTTP/SSE protocol: one clock read per socket read, counts events with bytes.count
  worker      one process, one event loop, its share of the schedule; writes JSONL records incrementally
  runner      spawns workers, live line, Ctrl-C, merges records, sweeps
  records     the per-request record (raw timestamps) and JSONL io
  measured    per-request metrics from records (servelab.metrics' definitions) and the client extras
  result      result JSON (vLLM field names + servelab extras), printing, summary table
  mock_server a cheap streaming server with no model that can misbehave on purpose
"""
