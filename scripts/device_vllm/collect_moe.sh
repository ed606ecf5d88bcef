#!/bin/bash
# Issue 30: vLLM 0.25.0's fused_moe_kernel on bf16 (unquantised) experts, timed by the collector's
# fused_moe_bf16 entry (65 keys: Qwen3-30B-A3B at TP1, Qwen3-235B-A22B at TP 1/2/4/8, ep 1), and nothing else.
# Runs after calls 1 and 1b on the same machine, or alone: it needs only the carried folders
#   .ek/vllm-0.25.0-bf16moe  the wheel's fused-MoE sources and tuned tables, with their manifest (made here by
#                            `servelab collect --engine vllm --kernels fused_moe_bf16 --engine-files WHEEL
#                            --extract-to .ek/vllm-0.25.0-bf16moe --dry-run`)
#   .ek/whl                  servelab's dependencies the image lacks (pydantic and its four)
# and writes $OUT/bf16moe.tgz (the campaign), $OUT/log.txt, $OUT/gpu.txt. scripts/device_vllm/README.md says
# how its rows become the shipped table.
set -o pipefail
source scripts/device_vllm/env.sh   # NVLink multicast off, as .gpu/s/env.sh (its copy)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .ek/whl/*.whl || exit 9
export PYTHONPATH=/tmp/site:$PWD/src:/tmp/gsite
EK=.ek/vllm-0.25.0-bf16moe
SRC=vllm/model_executor/layers/fused_moe/fused_moe.py
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv | tee $OUT/gpu.txt
SYS=h100_sxm; grep -q H200 $OUT/gpu.txt && SYS=h200_sxm
# where call 1 unpacked vLLM, its fused_moe.py is the carried one (one wheel)
if [ -f /tmp/gsite/$SRC ]; then cmp $EK/$SRC /tmp/gsite/$SRC || exit 4; fi
C=campaigns/${SYS}_vllm_0.25.0_bf16moe
T0=$(date +%s)
python3 -m servelab.cli.main collect --engine vllm --system $SYS --gpus 1 --engine-files $EK \
  --kernels fused_moe_bf16 --out $C --max-minutes ${MAX_MIN:-2} 2>&1 | tail -12 | tee $OUT/log.txt
echo "collect took $(( $(date +%s) - T0 )) s" | tee -a $OUT/log.txt
tar czf $OUT/bf16moe.tgz $C
