#!/bin/bash
# The rows collect_moe.sh brought back, into the shipped table: unpack the campaign, name it among the
# campaigns of h100_sxm/vllm/0.25.0 in scripts/generated.py, rebuild that table from them with the merge
# command generated.py lists, then refit the ratios and transfer (servelab db fit), as generated.py checks.
# Usage (repository root, main's python): bash scripts/device_vllm/ingest_moe.sh FILES_AT/bf16moe.tgz [PYTHON]
set -euo pipefail
archive=$(realpath "$1")
py=${2:-.venv/bin/python}
campaign=campaigns/h100_sxm_vllm_0.25.0_bf16moe
table=src/servelab/perfdb/data/h100_sxm/vllm/0.25.0
export PYTHONPATH=$PWD/src
[ -e "$campaign" ] && { echo "$campaign: already there (remove it to ingest again)" >&2; exit 2; }
tar -xzf "$archive" "$campaign"
"$py" - "$campaign/vllm" <<'PY'
import sys
from pathlib import Path

# generated.py's entry for the table gains the campaign, after the elementwise one (once)
path, line = Path("scripts/generated.py"), f'        "{sys.argv[1]}",\n'
anchor = '        "campaigns/h100_sxm_vllm_0.25.0_elementwise/vllm",\n'
text = path.read_text()
if line not in text:
    if text.count(anchor) != 1:
        sys.exit(f"{path}: expected one line {anchor.strip()} to add the campaign after")
    path.write_text(text.replace(anchor, anchor + line))
PY
merge=$("$py" scripts/generated.py --list --json --only "$table" | "$py" -c \
  "import json, sys; print(json.load(sys.stdin)[0]['command'].split('  (')[0].removeprefix('servelab '))")
case "$merge" in *"$campaign/vllm"*) ;; *) echo "generated.py's merge does not name $campaign" >&2; exit 2;; esac
rm -f "$table"/*.parquet   # the merge goes into an empty directory
"$py" -m servelab.cli.main $merge
"$py" -m servelab.cli.main db fit --into src/servelab/perfdb/data
# Qwen3-30B-A3B's experts at 16 tokens, now measured in vLLM's table
"$py" -m servelab.cli.main db query moe -s h100_sxm --tables "$table" --tokens 16 --hidden 2048 --inter 768 \
  --experts 128 --topk 8 --ep 1 --dtype bf16
