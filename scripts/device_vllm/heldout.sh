#!/bin/bash
# Call 2 for held-out runs (used in the thirteenth session in place of all.sh): the server, then the runs;
# prints only completed and failed counts, so nothing measured is seen until the results are opened.
set -o pipefail
bash .gpu/s/start.sh 2>&1 | grep -E "import ok|server up|server died|KV cache|Error|rror" | tail -8 || exit 1
export SEED_OFFSET=101
for run in "C 2048 512 160" "D 4096 128 96" "C 2048 512 48" "D 4096 128 40" "E 512 1024 24" "D 4096 128 12" "C 2048 512 4"; do
  set -- $run
  bash .gpu/s/bench.sh $run > /tmp/log_$1_c$4.txt 2>&1
  echo "$1 c$4 rc=$? $(date +%T) $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('completed', d['completed'], 'failed', d['failed'])" /tmp/gres/$1_c$4.json 2>&1 | tail -1)"
  cp /tmp/log_$1_c$4.txt /tmp/gres/ 2>/dev/null; tar -C /tmp --exclude '*.jsonl' -cJf $OUT/res.tar.xz gres
done
grep -v "GET /metrics\|POST /v1\|GET /health" /tmp/server.log > $OUT/server.log
