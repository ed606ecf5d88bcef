#!/bin/bash
# Call 1: vLLM 0.25.0's Python package and its two kernel libraries (sm_90 images only) into /tmp/gsite.
set -eu
mkdir -p /tmp/gsite
tar -C /tmp/gsite -xJf .gpu/p1/vllm_py.tar.xz
xz -dc .gpu/p1/C.xz > /tmp/gsite/vllm/_C_stable_libtorch.abi3.so
xz -dc .gpu/p1/fa3.xz > /tmp/gsite/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
python3 -c "import sys, torch, transformers, tokenizers; print(sys.version.split()[0], torch.__version__, torch.version.cuda, transformers.__version__, tokenizers.__version__)"
nproc; free -g | head -2; df -h . | tail -1; which curl gcc cc || true
PYTHONPATH=/tmp/gsite python3 -c "import torch, vllm._C_stable_libtorch, vllm.vllm_flash_attn._vllm_fa3_C; print('kernels load', torch.cuda.get_device_name())"
