#!/usr/bin/env bash
# The H100 torch sample of the H200 torch campaign's keys, resumed for its MoE and GEMM keys (transfer fits).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .ek/whl/*.whl || exit 9
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee $OUT/gpu.txt
grep -q H100 $OUT/gpu.txt || { echo "not an H100: the sample is the H100's"; exit 4; }
C=campaigns/h100_sxm_torch_sample
python3 -m servelab.cli.main collect --system h100_sxm --gpus 1 --repeat-of campaigns/h200_sxm --ops moe,gemm --sample 120 --out $C --max-minutes 1.5 2>&1 | tail -10 | tee -a $OUT/log.txt
tar czf $OUT/campaigns.tgz $C; ls -la $OUT
