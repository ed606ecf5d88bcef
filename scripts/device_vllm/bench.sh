#!/bin/bash
# bench.sh TAG ISL OSL C...: servelab bench closed loop at each concurrency, 5 x C prompts (at least 16),
# InferenceX's length rule (ratio 0.8), vLLM's /metrics read before and after each run.
# SEED_OFFSET (default 0) moves every seed: a repeat under another tag then shares no prompt with the first run.
set -u
source .gpu/s/env.sh
tag=$1 isl=$2 osl=$3; shift 3
mkdir -p /tmp/gres
for c in "$@"; do
  n=$(( 5 * c )); [ $n -lt 16 ] && n=16
  get http://127.0.0.1:8000/metrics > /tmp/gres/metrics_${tag}_c${c}_before.txt
  PYTHONPATH=$PWD/src:/tmp/gsite python3 -m servelab.cli.main bench --base-url http://127.0.0.1:8000 \
    --model "$SERVED_NAME" --tokenizer "$MODEL_DIR" --dataset-name random --random-input-len $isl \
    --random-output-len $osl --random-range-ratio 0.8 --random-range-rule inferencex --max-concurrency $c \
    --num-prompts $n --seed $(( c * 10 + isl + ${SEED_OFFSET:-0} )) --save-result --save-detailed --result-dir /tmp/gres \
    --result-filename ${tag}_c${c}.json --no-live 2>&1 | tail -22
  get http://127.0.0.1:8000/metrics > /tmp/gres/metrics_${tag}_c${c}_after.txt
  # what comes back: the result less its inter-token gaps and texts, no per-request JSONL (22 MB in all)
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); [d.pop(k, None) for k in ('itls', 'generated_texts')]; json.dump(d, open(sys.argv[1], 'w'))" /tmp/gres/${tag}_c${c}.json
  tar -C /tmp --exclude '*.jsonl' -cJf $OUT/res.tar.xz gres
done
grep -v "GET /metrics\|POST /v1\|GET /health" /tmp/server.log > $OUT/server.log
