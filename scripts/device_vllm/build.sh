#!/bin/bash
# Build what vLLM's OpenAI server needs on the device machine (an H100/H200 image with python 3.12 and torch
# 2.11 but no vLLM and no network), in pieces that fit a call's 64 MiB with the working tree:
#   .gpu/p1  vLLM 0.25.0's Python package and its two kernel libraries, sm_90 images only (about 31 MiB)
#   .gpu/p2  the Python packages the image lacks, and a Llama-3.1-8B-shaped model folder (about 33 MiB)
#   .gpu/p3  vLLM's MoE kernel library (sm_90 images only) and a Qwen3-30B-A3B-shaped model folder (about 14 MiB),
#            for a MoE model only
#   .gpu/s   the scripts the calls run
# and, since the working tree is 37 MiB as the device counts it (whole 4 KiB blocks) and neither p1 nor p2 fits
# beside it any more, the same files in call-sized folders (hard links; README.md, "Steps"):
#   .gpu/k   p1's two kernel libraries (24 MiB)       .gpu/v    p1's Python package and unpack.sh (6 MiB)
#   .gpu/p2a p2's dependencies, first 17 MiB          .gpu/p2b  the rest, the model folder, their sha256
# Usage: bash scripts/device_vllm/build.sh PRESENT_PACKAGES_FILE [WORK_DIR]
#   PRESENT_PACKAGES_FILE: the image's packages, comma separated (the device library's KINDS.md list)
# Needs: pip, uv (pip install uv), xz, readelf, and a python with tokenizers and transformers for the model
# folder ($TOKENIZER_PYTHON, default .venv-vllm/bin/python). Add `/.gpu/` to .git/info/exclude first.
set -euo pipefail
present=$(realpath "$1")
work=${2:-/tmp/device_vllm}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tok_python=${TOKENIZER_PYTHON:-$root/.venv-vllm/bin/python}
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
  --platform manylinux_2_24_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_5_x86_64
  --platform manylinux1_x86_64)
cross=(--only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}")
mkdir -p "$work/whl" "$work/x" "$work/deps" "$root/.gpu/p1" "$root/.gpu/p2" "$root/.gpu/p3" "$root/.gpu/s"
cd "$work"

python3 -m pip download -q --no-deps "${cross[@]}" -d whl vllm==0.25.0
wheel=$(ls whl/vllm-0.25.0-*.whl)
rm -rf x/* && unzip -q -o "$wheel" -d x
python3 "$here/strip_fatbin.py" 90 x/vllm/_C_stable_libtorch.abi3.so
xz -T0 -6 -c x/vllm/_C_stable_libtorch.abi3.so > "$root/.gpu/p1/C.xz"
xz -T0 -6 -c x/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so > "$root/.gpu/p1/fa3.xz"
python3 "$here/strip_fatbin.py" 90 x/vllm/_moe_C_stable_libtorch.abi3.so
xz -T0 -6 -c x/vllm/_moe_C_stable_libtorch.abi3.so > "$root/.gpu/p3/moe.xz"
# everything else but FA2 (no sm_90 image), the MoE library (in p3: a dense model does not load it), the
# Rust front end, and DeepGEMM's / Blackwell FMHA's headers and other pythons' builds
(cd x && tar -cf - --exclude='vllm/vllm_flash_attn/_vllm_fa[23]_C.abi3.so' --exclude='vllm/_moe_C_stable_libtorch.abi3.so' \
  --exclude='vllm/_C_stable_libtorch.abi3.so' --exclude='vllm/vllm-rs' --exclude='vllm/third_party/*/include' \
  --exclude='vllm/third_party/fmha_sm100' --exclude='vllm/third_party/deep_gemm/_C.cpython-31[0134]*' \
  vllm vllm-0.25.0.dist-info) | xz -T0 -6 > "$root/.gpu/p1/vllm_py.tar.xz"

# vLLM's dependencies as of its release, less torch's family and the kernel packages a dense model on Hopper
# does not import (uv drops a requirement overridden with a marker that never holds)
for name in torch torchvision torchaudio triton flashinfer-python flashinfer-cubin tilelang nvidia-cutlass-dsl \
  quack-kernels tokenspeed-mla humming-kernels torchcodec PyNvVideoCodec nvidia-cudnn-frontend nvtx \
  fastsafetensors numba; do echo "$name ; sys_platform == 'never'"; done > overrides.txt
echo "vllm @ file://$work/$wheel" > req.in
python3 -m uv pip compile req.in --override overrides.txt --exclude-newer 2026-07-12 --python-version 3.12 \
  --python-platform x86_64-manylinux_2_28 --no-header --no-annotate -o pins.txt -q
python3 - "$present" <<'PY'
import sys
from packaging.utils import canonicalize_name as cn
present = {cn(x.strip()) for x in open(sys.argv[1]).read().split(",") if x.strip()}
pins = [l.strip() for l in open("pins.txt") if l.strip() and not l.startswith(("vllm", "#"))]
open("missing.txt", "w").write("".join(p + "\n" for p in pins if cn(p.split("==")[0]) not in present))
PY
rm -rf deps/* site && python3 -m pip download -q --no-deps "${cross[@]}" -d deps -r missing.txt
python3 -m pip install -q --no-deps --no-compile "${cross[@]}" --target site deps/*.whl
rm -rf site/bin site/xgrammar/lib/*.a site/pycountry/locales   # static libraries and translations: not loaded
tar -C site -cf - . | xz -T0 -6 > "$root/.gpu/p2/deps.tar.xz"

"$tok_python" "$here/model.py" "$work/model"
tar -C "$work" -cJf "$root/.gpu/p2/model.tar.xz" model
rm -rf "$work/qwen" && "$tok_python" "$here/model.py" "$work/qwen/model" qwen3-30b-a3b
tar -C "$work/qwen" -cJf "$root/.gpu/p3/model_qwen.tar.xz" model
cp "$here"/{unpack,env,server_args,start,bench,all,heldout}.sh "$root/.gpu/s/" && mv "$root/.gpu/s/unpack.sh" "$root/.gpu/p1/"
cp "$here/unpack_moe.sh" "$root/.gpu/p3/"
mkdir -p "$root"/.gpu/{k,v,p2a,p2b}
ln -f "$root"/.gpu/p1/{C.xz,fa3.xz} "$root/.gpu/k/" && ln -f "$root"/.gpu/p1/{vllm_py.tar.xz,unpack.sh} "$root/.gpu/v/"
(cd "$root/.gpu" && rm -f p2a/x* p2b/x* && split -b 17M -d p2/deps.tar.xz p2a/x && mv p2a/x01 p2b/ \
  && ln -f p2/model.tar.xz p2b/ && sha256sum p2/deps.tar.xz > p2b/deps.sha256)
du -sh "$root"/.gpu/*
