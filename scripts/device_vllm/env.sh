# Sourced by start.sh and bench.sh on the device: NVLink multicast off (the device rules), no network, vLLM's
# packages from /tmp/gsite, and `get URL` (the image has python, so no curl is relied on).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 TOKENIZERS_PARALLELISM=false
# vLLM 0.25.0's V2 model runner imports FlashInfer for its sampler unless told not to; FlashInfer is left out
export VLLM_USE_FLASHINFER_SAMPLER=0
export PYTHONPATH=/tmp/gsite
# the model folder served and its name (start.sh, bench.sh): the Llama-3.1-8B-shaped one unless set
export MODEL_DIR=${MODEL_DIR:-/tmp/gm/model} SERVED_NAME=${SERVED_NAME:-llama-8b-dummy}
get() { python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())" "$1"; }
