"""The capture sandbox's machine: the tools and files upstream's scripts read answer as an idle node of
upstream's does (rocm-smi, hf download, an RDMA port, the SGLang source the scripts patch), inside the
sandbox only, so a script reaches its server command."""

import shutil

import pytest

from servelab.recipes.capture.sandbox import Sandbox

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="launch scripts run under bash")

SCRIPT = r"""#!/usr/bin/env bash
set -euo pipefail
source "$(dirname "$0")/../../benchmark_lib.sh"
VRAM_MAX=$(rocm-smi --showmemuse | grep -oE "GPU Memory Allocated \(VRAM%\): [0-9]+" \
    | awk '{if ($NF > m) m = $NF} END {print m+0}')
MEC=$(rocm-smi --showfw | grep MEC | head -n 1 | awk '{print $NF}')
hf download org/model --local-dir ckpt > /dev/null
SNAPSHOT=$(hf download org/other)
python3 - "$SNAPSHOT" <<'PY'
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
shards = json.loads((d / "model.safetensors.index.json").read_text())["weight_map"].values()
assert all((d / s).is_file() for s in shards) and (d / "config.json").is_file()
PY
grep -q ACTIVE /sys/class/infiniband/mlx5_0/ports/1/state
SRC=/sgl-workspace/sglang/python/sglang/srt/managers/multi_tokenizer_mixin.py
sed -i '/cached_tokens=_extract_field_by_index/a\            patched=True,' "$SRC"
grep -q "patched=True" "$SRC"
vllm serve org/model --max-num-seqs "$VRAM_MAX" --seed "$MEC" --download-dir "$(dirname "$SNAPSHOT")" &
"""


def test_a_script_reading_the_machine_reaches_its_server(tmp_path):
    bench = tmp_path / "benchmarks"
    (bench / "single_node" / "agentic").mkdir(parents=True)
    (bench / "single_node" / "agentic" / "probe.sh").write_text(SCRIPT)
    with Sandbox(bench) as box:
        got = box.run("single_node/agentic/probe.sh", {"PORT": "8888"})
        # an idle node: no GPU memory in use; MEC firmware below 177 (the scripts' workaround on)
        assert got.get("refused") is None, got
        assert got["argv"][:5] == ["vllm", "serve", "org/model", "--max-num-seqs", "0"]
        assert got["argv"][6] == "0"
        # the snapshot hf laid out in the sandbox's cache, as a path relative to the job
        assert got["argv"][8] == ".cache/huggingface/hub/models--org--other/snapshots"
        # the source the script patched is the sandbox's stand-in, not a path of this machine
        src = (
            box.root / "machine" / "sgl-workspace/sglang/python/sglang/srt/managers/multi_tokenizer_mixin.py"
        )
        assert "patched=True" in src.read_text()


# What apply_k3_container_patches.sh does before it patches (a script beside the launch script it runs): find
# the image's vLLM and AITER, write its diffs to a scratch folder, apply them there.
PATCHER = r"""#!/usr/bin/env bash
set -uo pipefail
ROOT="$(python -c 'import importlib.util as u, os
print(os.path.dirname(os.path.dirname(u.find_spec("vllm").origin)))')"
if [ -z "$ROOT" ] || [ ! -d "$ROOT/vllm" ] || [ ! -d "$ROOT/aiter" ]; then
  echo "ERROR: ROOT='$ROOT'"; exit 1
fi
WS="${WS:-/tmp/k3_embed}"; mkdir -p "$WS"
echo "diff" > "$WS/one.diff"
echo "# patched" >> "$ROOT/vllm/__init__.py"
echo "$ROOT" > "$WS/root"
"""
LAUNCHER = r"""#!/usr/bin/env bash
set -euo pipefail
bash "$(dirname "$0")/patch_image.sh"
vllm serve org/model &
"""


def test_a_script_patching_the_image_patches_the_sandboxs_stand_ins(tmp_path):
    bench = tmp_path / "benchmarks"
    (bench / "single_node" / "agentic").mkdir(parents=True)
    (bench / "single_node" / "agentic" / "launch.sh").write_text(LAUNCHER)
    (bench / "single_node" / "agentic" / "patch_image.sh").write_text(PATCHER)
    with Sandbox(bench) as box:
        got = box.run("single_node/agentic/launch.sh", {"PORT": "8888"})
        assert got.get("refused") is None, got
        assert got["argv"][:3] == ["vllm", "serve", "org/model"]
        # the image's packages are the sandbox's stand-ins (this machine's are out of reach), and the
        # scratch folder is the sandbox's
        packages = box.root / "machine" / "usr/local/lib/python3/dist-packages"
        assert (packages / "vllm" / "__init__.py").read_text() == "# patched\n"
        scratch = box.root / "machine" / "tmp" / "k3_embed"
        assert (scratch / "root").read_text().strip() == str(packages)
        assert (scratch / "one.diff").is_file()
