"""servelab's load generator (`servelab bench`): a drop-in for `vllm bench serve` that is never the
bottleneck.

Modules, one job each:
  config      BenchConfig, the typed form of every flag (validated once)
  tokenizer   optional local tokenizer (tokenizers / transformers) for exact prompt lengths
  lengths     the request-length rule (vLLM's random dataset), shared with the simulator
  datasets    random, sharegpt, sonnet, hf, prefix (prefix_repetition), multiturn, custom -> BenchItem list
  hf_local    rows of a local dataset file or datasets folder (the hf dataset), prompts and answers
  schedule    arrival offsets from the seed (gamma gaps, ramp-up), computed up front
  payload     pre-serialized HTTP requests for /v1/completions and /v1/chat/completions
  client      the streaming HTTP/SSE protocol: one clock read per socket read, counts events with bytes.count
  worker      one process, one event loop, its share of the schedule: the request loop
  accounting  the worker's counters, the shared progress slots and its summary
  records     the per-request record (raw timestamps), its writer and JSONL io
  runner      prepares a point, spawns workers (live line, Ctrl-C), merges records, sweeps
  progress    the status line (warm-up and run), cut to the terminal; off a terminal a plain line per interval
  profiles    GuideLLM's benchmark profiles (--profile) as the load flags they stand for
  rate_sweep  the automatic rate sweep: a generator sent each step's result
  measured    per-request metrics from records (servelab.metrics' definitions) and the client extras
  evaluate    merged records -> BenchResult (summary, client health, token-count sources)
  result      BenchResult and the result file (vLLM field names + servelab extras)
  report      the printed report, warnings and the sweep table
  mock_server a cheap streaming server with no model that can misbehave on purpose
"""
