#!/usr/bin/env bash
# Retry the DeepSeek-V4 context keys that FlashMLA refused (index lists padded to 64, not 128), then a repeat
# sample of the HCA context rows.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .ek/whl/*.whl || exit 9
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee $OUT/gpu.txt
SYS=h100_sxm; grep -q H200 $OUT/gpu.txt && SYS=h200_sxm
C=campaigns/${SYS}_vllm_0.25.0
[ -d $C ] || { echo "no campaign $C on $SYS: not resuming another GPU's campaign"; exit 4; }
S="python3 -m servelab.cli.main collect --engine vllm --system $SYS --gpus 1 --engine-files .ek/vllm-0.25.0 --kernels dsv4_flashmla"
pack() { tar czf $OUT/campaigns.tgz $C ${C}_repeat 2>/dev/null; }
$S --out $C --retry-errors --max-minutes 3 2>&1 | tail -12 | tee -a $OUT/log.txt
cp $C/vllm/errors.jsonl $OUT/main_errors.jsonl; pack
$S --ops dsv4_hca_context_module --repeat-of $C --sample 8 --out ${C}_repeat2 --max-minutes 0.8 2>&1 | tail -6 | tee -a $OUT/log.txt
python3 -m servelab.cli.main db compare-repeat $C/vllm ${C}_repeat2/vllm > $OUT/spread_hca.json 2>&1
tar czf $OUT/campaigns.tgz $C ${C}_repeat ${C}_repeat2; ls -la $OUT
