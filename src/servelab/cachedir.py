"""servelab's cache directory of this user: $SERVELAB_CACHE_DIR, else $XDG_CACHE_HOME/servelab, else
~/.cache/servelab. What is kept there (read perf tables, launch captures) can always be made again."""

import os
from pathlib import Path

ENV_DIR = "SERVELAB_CACHE_DIR"


def cache_root() -> Path:
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "servelab"
