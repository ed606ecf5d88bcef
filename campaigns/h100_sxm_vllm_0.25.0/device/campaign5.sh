#!/usr/bin/env bash
# Call 5 (2026-12-05): vLLM 0.25.0's CUTLASS block-FP8 GEMM and torch's fp8_block GEMM at DeepSeek-V4-Flash's
# (then -Pro's) linear-layer keys, one H100. Carried: .ek/fp8gemm (the wheel's _C, its non-sm_90 fatbin images zeroed, xz-compressed, with its
# manifest, this driver, the bench module and keys.json made by fp8gemm_keys.py). No pydantic on the machine
# and no room for its wheels: fp8gemm.py imports only what needs none. Rows come back in $OUT/r.
set -o pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
E=.ek/fp8gemm
T0=$(date +%s); DEADLINE=$((T0 + ${BUDGET:-330}))
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv | tee $OUT/gpu.txt
cp $E/vllm_cutlass_gemm.py src/servelab/collect/engines/ || exit 4
mkdir -p /tmp/C/vllm && cp $E/manifest.json /tmp/C/ && (xz -dc $E/C.so.xz || python3 -c "import lzma,sys,shutil;shutil.copyfileobj(lzma.open(sys.argv[1]),sys.stdout.buffer)" $E/C.so.xz) > /tmp/C/vllm/_C_stable_libtorch.abi3.so || exit 5
echo "unpacked in $(( $(date +%s) - T0 )) s" | tee -a $OUT/log.txt
for i in $(seq 1 30); do
  timeout $(( DEADLINE - $(date +%s) + 40 )) python3 $E/fp8gemm.py --keys $E/keys.json --files /tmp/C --out $OUT/r --deadline $DEADLINE 2>&1 | tee -a $OUT/log.txt
  rc=$?; echo "pass $i rc=$rc at $(( $(date +%s) - T0 )) s" | tee -a $OUT/log.txt
  [ $rc -eq 0 ] && break
  [ $(date +%s) -ge $DEADLINE ] && break
done
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv >> $OUT/gpu.txt
wc -l $OUT/r/*.jsonl | tee -a $OUT/log.txt
