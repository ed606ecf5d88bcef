#!/bin/bash
# Call 1b (a MoE model only): vLLM's MoE kernel library (sm_90 images only) into /tmp/gsite after call 1, and
# the Qwen3-30B-A3B-shaped model folder into /tmp/gq; checks the library loads.
set -eu
xz -dc .gpu/p3/moe.xz > /tmp/gsite/vllm/_moe_C_stable_libtorch.abi3.so
mkdir -p /tmp/gq && tar -C /tmp/gq -xJf .gpu/p3/model_qwen.tar.xz
PYTHONPATH=/tmp/gsite python3 -c "import torch, vllm._moe_C_stable_libtorch; print('moe kernels load', hasattr(torch.ops._moe_C, 'topk_softmax'))"
