#!/bin/bash
# Held-out runs (in place of all.sh): the server unless it is already up, then each run given as an argument
# ("TAG ISL OSL C"); prints only completed and failed counts, so nothing measured is seen until the results
# are opened. SEED_OFFSET moves every seed (bench.sh); STOP_AFTER (seconds from the call's start, the server's
# start included; default 480) starts no run after that, so the call ends inside its limit and a next call
# runs the rest on the same server. SERVER_ARGS (start.sh) gives the server a recipe's scheduler limits.
# host.txt in the results: the host's CPU (host_speed.py), measured before the server starts.
#   bash .gpu/s/heldout.sh "C 2048 512 160" "D 4096 128 96"
set -o pipefail
source .gpu/s/env.sh
began=$SECONDS
# the host's CPU model and one core's speed (host_speed.py), once per machine, returned with the results
mkdir -p /tmp/gres && [[ -e /tmp/gres/host.txt ]] || PYTHONPATH=$PWD/src python3 .gpu/s/host_speed.py > /tmp/gres/host.txt 2>&1
if ! get http://127.0.0.1:8000/health > /dev/null 2>&1; then
  bash .gpu/s/start.sh 2>&1 | grep -E "server args|import ok|server up|server died|KV cache|Error|rror" | tail -9
  get http://127.0.0.1:8000/health > /dev/null 2>&1 || { echo "server not up"; exit 1; }
fi
for run in "$@"; do
  read -r tag isl osl c <<< "$run"
  if (( SECONDS - began > ${STOP_AFTER:-480} )); then echo "$tag c$c not started: past STOP_AFTER"; continue; fi
  bash .gpu/s/bench.sh "$tag" "$isl" "$osl" "$c" > /tmp/log_${tag}_c$c.txt 2>&1
  echo "$tag c$c rc=$? $(date +%T) $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('completed', d['completed'], 'failed', d['failed'])" /tmp/gres/${tag}_c$c.json 2>&1 | tail -1)"
  cp /tmp/log_${tag}_c$c.txt /tmp/gres/ 2>/dev/null; tar -C /tmp --exclude '*.jsonl' -cJf $OUT/res.tar.xz gres
done
grep -v "GET /metrics\|POST /v1\|GET /health" /tmp/server.log > $OUT/server.log
