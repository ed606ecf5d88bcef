#!/usr/bin/env bash
# Creates the environment that runs BFCL (bfcl-eval) for `servelab run`'s bfcl stage and its tests.
# Path: $SERVELAB_BFCL_VENV, default <repo>/.venv-bfcl; servelab finds it there, or through
# SERVELAB_BFCL_PYTHON=<env>/bin/python. Idempotent: exits early when the env already imports bfcl-eval's
# generate and evaluate commands. About 570 MB; 1.5 to 3.5 minutes on a busy 2-core machine.
# bfcl-eval pins numpy==1.26.4 and some 30 exact versions, so it cannot share servelab's environment. It is
# installed without its dependencies, then with all of them except sentence-transformers and faiss-cpu: those
# serve only the memory_vector category and pull torch (GBs). Every API SDK stays, because bfcl-eval's model
# table imports every handler when it loads.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SERVELAB_BFCL_VENV:-$repo/.venv-bfcl}"
py="${PYTHON:-python3.11}"
command -v "$py" >/dev/null 2>&1 || py=python3
bfcl_version="2026.3.23"

check() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" -c \
    'import bfcl_eval.__main__, importlib.metadata as m; assert m.version("bfcl-eval") == "'"$bfcl_version"'"' \
    >/dev/null 2>&1
}

if check; then
  echo "bfcl environment already works: $venv"
  exit 0
fi
echo "creating bfcl environment in $venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet --no-deps "bfcl-eval==$bfcl_version"
# bfcl-eval's requirements (its METADATA) less sentence-transformers and faiss-cpu; pip then reports those two
# as missing requirements of bfcl-eval, which is expected.
"$venv/bin/python" -m pip install --quiet \
  requests tqdm "numpy==1.26.4" pandas huggingface_hub "pydantic>=2.8.2" "python-dotenv>=1.0.1" \
  "tree_sitter==0.21.3" "tree-sitter-java==0.21.0" "tree-sitter-javascript==0.21.4" "openai>=1.86.0" \
  "mistralai==1.7.0" "anthropic>=0.75.0" "cohere==5.18.0" "typer>=0.12.5" "tabulate>=0.9.0" \
  "datamodel-code-generator==0.25.7" "google-genai>=1.52.0" qwen-agent "mpmath==1.3.0" "tenacity>=8.5.0" \
  "writer-sdk>=2.1.0" overrides boto3 beautifulsoup4 html2text "rank_bm25==0.2.2" google-search-results \
  "networkx==3.3" "filelock==3.20.0" \
  soundfile  # qwen-agent imports it at load time without requiring it
if check; then
  echo "bfcl environment ready: $venv"
else
  echo "bfcl environment in $venv does not import bfcl_eval" >&2
  exit 1
fi
