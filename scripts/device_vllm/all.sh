#!/bin/bash
# Call 2: start the server, then the runs in order of what they tell most (long prompts and many clients first).
set -o pipefail
bash .gpu/s/start.sh 2>&1 | tail -40 || exit 1
for run in "B 8192 256 32" "A 1024 256 256" "A 1024 256 64" "B 8192 256 8" "A 1024 256 16" "A 1024 256 1" "B 8192 256 64"; do
  bash .gpu/s/bench.sh $run 2>&1 | grep -E "Median TTFT|Median TPOT|Output token throughput|Failed|rror|result:"
done
