"""Captures of a user's launch scripts, kept between sweeps so that a second sweep runs no bash.

One JSON file per script content and capture context, under the user's cache directory
(`$SERVELAB_CACHE_DIR`, else `$XDG_CACHE_HOME/servelab`, else `~/.cache/servelab`), in `launch-captures/`:

    <script sha256>-<context>.json   {"format": 1, "script": name, "runs": {job key: capture}}

`context` is a digest of what else a capture depends on: servelab's stubs (the stub server and
benchmark_lib.sh) and the chat templates of the checkout the sandbox copies. A job key is a digest of the
job's environment. Files are written whole to a temporary file in the same directory and renamed over the old
one, so a reader never sees half a file, and each writer merges what is there first: concurrent sweeps may
each redo a capture the other made meanwhile, never corrupt one. A cache that cannot be read or written is no
cache (the sweep captures again), never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from servelab.cachedir import cache_root

FORMAT = 1
FOLDER = "launch-captures"


def digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def job_key(env: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()[:32]


class CaptureCache:
    def __init__(self, root: Path | None = None):
        self.folder = (root or cache_root()) / FOLDER

    def path(self, script_sha256: str, context: str) -> Path:
        return self.folder / f"{script_sha256}-{context[:16]}.json"

    def load(self, script_sha256: str, context: str) -> dict[str, dict]:
        """The captures kept for this script content and context, by job key ({} when none or unreadable)."""
        try:
            data = json.loads(self.path(script_sha256, context).read_text())
        except (OSError, ValueError):
            return {}
        runs = data.get("runs") if isinstance(data, dict) and data.get("format") == FORMAT else None
        return {k: v for k, v in runs.items() if isinstance(v, dict)} if isinstance(runs, dict) else {}

    def save(self, script_sha256: str, context: str, script: str, runs: dict[str, dict]) -> bool:
        """Add `runs` to the file (write-then-rename); False when the cache cannot be written."""
        path = self.path(script_sha256, context)
        merged = self.load(script_sha256, context) | runs
        text = json.dumps({"format": FORMAT, "script": script, "runs": merged}, sort_keys=True)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{path.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            return False
        return True
