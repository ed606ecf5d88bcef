#!/usr/bin/env bash
# Issue 29's GPU campaign, one device call: vLLM 0.25.0's engine kernels (DeepSeek-V4 modules on FlashMLA,
# fused-MoE Triton, Marlin MoE), a repeat sample, and on an H100 a torch sample of the same keys (the
# torch-to-vLLM ratio on one system) and of the H200 torch campaign's keys (the H100 -> H200 transfer fit).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .ek/whl/*.whl || exit 9
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s); left() { echo $(( ${BUDGET:-560} - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv | tee $OUT/gpu.txt
SYS=h100_sxm; grep -q H200 $OUT/gpu.txt && SYS=h200_sxm; echo "$SYS" | tee $OUT/sys.txt
python3 -c "import torch,triton;torch.ops.load_library('.ek/vllm-0.25.0/vllm/_flashmla_C.abi3.so');torch.ops.load_library('.ek/vllm-0.25.0-moe/vllm/_moe_C_stable_libtorch.abi3.so');print('loads:',torch.__version__,triton.__version__,torch.ops._flashmla_C.sparse_prefill_fwd,torch.ops._moe_C.moe_wna16_marlin_gemm)" 2>&1 | tee $OUT/check.log || exit 3
C=campaigns/${SYS}_vllm_0.25.0
S="python3 -m servelab.cli.main collect --engine vllm --system $SYS --gpus 1"
A="--engine-files .ek/vllm-0.25.0 --kernels dsv4_flashmla,fused_moe"
M="--engine-files .ek/vllm-0.25.0-moe --kernels marlin_moe"
log() { tee -a $OUT/log.txt; }
# pack after every stage: a call cut off at its limit still brings back what was measured
pack() { tar czf $OUT/campaigns.tgz campaigns/${SYS}_* campaigns/h100_sxm_torch_* -C /tmp smoke 2>/dev/null; }
echo "== smoke ($(left) s left)" | log
timeout 150 $S $A --smoke --out /tmp/smoke 2>&1 | tail -25 | log
cp /tmp/smoke/vllm/errors.jsonl $OUT/smoke_errors.jsonl 2>/dev/null
pack
echo "== main ($(left) s left)" | log
$S $A --out $C --max-minutes ${MAIN_MIN:-4} 2>&1 | tail -25 | log
pack
echo "== marlin ($(left) s left)" | log
$S $M --out $C --max-minutes ${MARLIN_MIN:-0.8} 2>&1 | tail -12 | log
pack
echo "== repeat ($(left) s left)" | log
$S $A --repeat-of $C --sample ${REPEAT:-30} --out ${C}_repeat --max-minutes 0.8 2>&1 | tail -8 | log
pack
if [ "$SYS" = h100_sxm ]; then
  echo "== torch at the engine's keys ($(left) s left)" | log
  python3 -m servelab.cli.main collect --system $SYS --gpus 1 --repeat-of $C/vllm --ops dsv4,moe --sample 60 --out campaigns/h100_sxm_torch_at_vllm --max-minutes 0.8 2>&1 | tail -8 | log
  pack
  echo "== torch at the H200 campaign's keys ($(left) s left)" | log
  python3 -m servelab.cli.main collect --system $SYS --gpus 1 --repeat-of campaigns/h200_sxm --ops gemm,dsv4,moe,attention --sample 150 --out campaigns/h100_sxm_torch_sample --max-minutes 0.8 2>&1 | tail -8 | log
fi
pack
for b in vllm; do python3 -m servelab.cli.main db compare-repeat $C/$b ${C}_repeat/$b > $OUT/spread_$b.json 2>&1; done
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv >> $OUT/gpu.txt
pack; ls -la $OUT
echo "done ($(left) s left)" | log
