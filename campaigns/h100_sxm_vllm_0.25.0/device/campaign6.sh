#!/usr/bin/env bash
# Call 6 (2026-12-05, issue 28): vLLM 0.25.0's bandwidth-bound kernels as its RMSNorm (_C rms_norm) at
# DeepSeek-V4's Memory keys, torch's elementwise rows at the same keys and at the H200 campaign's keys (the
# torch-to-vLLM ratio and the H100 <-> H200 transfer for elementwise), a repeat sample, one H100. Carried:
# .ek/whl (pydantic and its dependencies), .ek/fp8gemm (the wheel's _C, non-sm_90 fatbin images zeroed,
# xz-compressed, with its manifest: see call 5).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .ek/whl/*.whl || exit 9
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s); left() { echo $(( ${BUDGET:-400} - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv | tee $OUT/gpu.txt
SYS=h100_sxm; grep -q H200 $OUT/gpu.txt && SYS=h200_sxm; echo "$SYS" | tee $OUT/sys.txt
mkdir -p /tmp/C/vllm && cp .ek/fp8gemm/manifest.json /tmp/C/ && (xz -dc .ek/fp8gemm/C.so.xz || python3 -c "import lzma,sys,shutil;shutil.copyfileobj(lzma.open(sys.argv[1]),sys.stdout.buffer)" .ek/fp8gemm/C.so.xz) > /tmp/C/vllm/_C_stable_libtorch.abi3.so || exit 5
C=campaigns/${SYS}_vllm_0.25.0_elementwise
S="python3 -m servelab.cli.main collect --system $SYS --gpus 1"
log() { tee -a $OUT/log.txt; }
pack() { tar czf $OUT/campaigns.tgz campaigns/${SYS}_vllm_0.25.0_elementwise* campaigns/${SYS}_torch_elementwise* 2>/dev/null; }
echo "== vllm rms_norm ($(left) s left)" | log
$S --engine vllm --engine-files /tmp/C --kernels rms_norm --out $C --max-minutes 3 2>&1 | tail -15 | log
cp $C/vllm/errors.jsonl $OUT/vllm_errors.jsonl 2>/dev/null
pack
echo "== torch at the same keys ($(left) s left)" | log
$S --repeat-of $C/vllm --ops elementwise --sample 400 --out campaigns/${SYS}_torch_elementwise --max-minutes 2 2>&1 | tail -8 | log
pack
echo "== torch at the base elementwise keys (the H200 campaign's) ($(left) s left)" | log
$S --ops elementwise --out campaigns/${SYS}_torch_elementwise_base --max-minutes 1 2>&1 | tail -6 | log
pack
echo "== repeat ($(left) s left)" | log
$S --engine vllm --engine-files /tmp/C --kernels rms_norm --repeat-of $C --sample 30 --out ${C}_repeat --max-minutes 0.8 2>&1 | tail -6 | log
pack
python3 -m servelab.cli.main db compare-repeat $C/vllm ${C}_repeat/vllm > $OUT/spread_vllm.json 2>&1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv >> $OUT/gpu.txt
pack; ls -la $OUT
echo "done ($(left) s left)" | log
