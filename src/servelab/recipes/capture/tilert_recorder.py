"""servelab's server stub for the TileRT capture (capture/tilert.py), run as `python`, `python3` and `vllm`:
it records its argv and environment (one JSON line in SERVELAB_RECORD) and starts nothing. It answers
setup_deps.sh's version queries (`python - PACKAGE`, from SERVELAB_VERSIONS) and imports (`python -c`), and
leaves the converted weights' index where the weight converter writes it (run_node.sh checks for it)."""

import json
import os
import sys

name, args = os.path.basename(sys.argv[1]), sys.argv[2:]
if args[:1] == ["-"]:
    print(json.loads(os.environ["SERVELAB_VERSIONS"]).get(args[1], ""))
    sys.exit(0)
if args[:1] == ["-c"]:
    sys.exit(0)
line = {"node": os.environ.get("SERVELAB_NODE"), "argv": [name, *args], "env": dict(os.environ)}
with open(os.environ["SERVELAB_RECORD"], "a") as f:
    f.write(json.dumps(line) + "\n")
if "--save_dir" in args:
    out = args[args.index("--save_dir") + 1]
    open(os.path.join(out, "model.safetensors.index.json"), "w").close()
