#!/bin/bash
# Call 2: the rest of vLLM's Python dependencies, then vLLM's OpenAI server on a model folder with random
# weights (--load-format dummy), left running in a session of its own. MODEL_DIR and SERVED_NAME (env.sh's
# defaults: the Llama-3.1-8B-shaped folder) pick another folder, e.g. the Qwen3-30B-A3B one of unpack_moe.sh.
# SERVER_ARGS sets a recipe's scheduler limits (server_args.sh: the batched-token budget, the sequence cap,
# the memory share); unset, the server keeps vLLM's defaults. ITERATION_LOG=1 adds vLLM's per-step log line
# (`--enable-logging-iteration-details`: each step's prompt and decode tokens and its elapsed ms, v1/engine/core.py);
# LOG_TIMES=1 stamps each log line to the microsecond.
set -u
source .gpu/s/env.sh
source .gpu/s/server_args.sh
server_args || exit 2
[[ ${ITERATION_LOG:-0} == 1 ]] && SERVER_ARGV+=(--enable-logging-iteration-details)
# LOG_TIMES=1: every log line starts with its time in seconds to the microsecond (vLLM's own format stops at
# the second), so consecutive `Iteration` lines give each step's period (vllm/logger.py reads
# VLLM_LOGGING_CONFIG_PATH, a logging.config.dictConfig file, in every process it starts)
if [[ ${LOG_TIMES:-0} == 1 ]]; then
  cat > /tmp/vllm_log_times.json <<'JSON'
{"version": 1, "disable_existing_loggers": false,
 "formatters": {"t": {"format": "%(created).6f %(levelname)s [%(filename)s:%(lineno)d] %(message)s"}},
 "handlers": {"h": {"class": "logging.StreamHandler", "formatter": "t", "level": "INFO", "stream": "ext://sys.stdout"}},
 "loggers": {"vllm": {"handlers": ["h"], "level": "INFO", "propagate": false}}}
JSON
  export VLLM_LOGGING_CONFIG_PATH=/tmp/vllm_log_times.json
fi
echo "server args: ${SERVER_ARGV[*]:-none (vLLM defaults)}"
# a second server on the same machine (a later call, where .gpu/p2 is gone) reuses what the first unpacked
if [[ ! -e /tmp/gsite/.deps_unpacked ]]; then
  mkdir -p /tmp/gsite && tar -C /tmp/gsite -xJf .gpu/p2/deps.tar.xz && mkdir -p /tmp/gm &&
    tar -C /tmp/gm -xJf .gpu/p2/model.tar.xz && touch /tmp/gsite/.deps_unpacked || exit 1
fi
python3 -c "import vllm, vllm.entrypoints.openai.api_server; from vllm.platforms import current_platform as p; print('import ok', vllm.__version__, p.device_type, type(p).__name__)" 2>&1 | tail -15
setsid nohup python3 -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" \
  --served-model-name "$SERVED_NAME" --load-format dummy --port 8000 "${SERVER_ARGV[@]}" > /tmp/server.log 2>&1 < /dev/null &
pid=$!
for i in $(seq 1 480); do
  if get http://127.0.0.1:8000/health >/dev/null 2>&1; then echo "server up after $i s"; break; fi
  if ! kill -0 $pid 2>/dev/null; then echo "server died"; break; fi
  sleep 1
done
grep -v "GET /metrics\|POST /v1" /tmp/server.log | tail -60
cp /tmp/server.log $OUT/server_start.log
get http://127.0.0.1:8000/health > /dev/null 2>&1 || exit 1
