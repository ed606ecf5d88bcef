"""A Hugging Face hub cache laid out as huggingface_hub lays it out, for the tests of models by hub id."""

import json
from pathlib import Path

QWEN = json.loads((Path(__file__).parents[1] / "src/servelab/specs/data/models/qwen3-32b.json").read_text())
CONFIG = {k: v for k, v in QWEN.items() if k != "_servelab"} | {"num_hidden_layers": 2}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fake_cache(root: Path, repo_id: str = "acme/tiny-qwen", config: dict = CONFIG) -> Path:
    """models--ORG--NAME/refs/main and snapshots/COMMIT/config.json under `root`; the snapshot folder."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config))
    return snap
