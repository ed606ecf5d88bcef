"""The one reader of Hugging Face hub files: a repo's file (a model's config.json) from the local hub cache,
offline, and from the hub when online; servelab installs nothing for it.

The cache is huggingface_hub's layout, where its environment variables put it (HF_HUB_CACHE,
HUGGINGFACE_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub):

    models--ORG--NAME/refs/main              the commit `main` points at
    models--ORG--NAME/snapshots/COMMIT/FILE  the files of that commit

The file is fetched over HTTPS from HF_ENDPOINT (default https://huggingface.co) with HF_TOKEN, in one try.
When huggingface_hub is installed its own lookup (`try_to_load_from_cache`) reads the cache, and its download
(`hf_hub_download`) keeps a fetched file there; without it servelab reads the same layout and keeps a fetched
file in memory only.
HF_HUB_OFFLINE=1 never touches the network.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}")
DEFAULT_ENDPOINT = "https://huggingface.co"
TIMEOUT_S = 10.0
MAX_FILE_BYTES = 16 << 20  # a config.json is kilobytes; a server sending more is not the hub


def is_repo_id(text: str) -> bool:
    """ORG/NAME as the hub names a model repository (a path like ./x/y is not one)."""
    return bool(REPO_ID.fullmatch(text)) and not text.startswith(".") and ".." not in text


def hub_cache_dir() -> Path:
    """Where huggingface_hub keeps downloaded repos (its own order of environment variables)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "huggingface" / "hub"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def snapshots(repo_id: str, cache: Path | None = None) -> list[Path]:
    """The repo's snapshot folders in the cache: the one refs/main names first, then the others, newest
    first."""
    repo = (cache or hub_cache_dir()) / ("models--" + repo_id.replace("/", "--"))
    folder = repo / "snapshots"
    found = []
    ref = repo / "refs" / "main"
    if ref.is_file():
        found.append(folder / ref.read_text().strip())
    if folder.is_dir():
        found += sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    return list(dict.fromkeys(p for p in found if p.is_dir()))


def cached_file(repo_id: str, filename: str) -> Path | None:
    """The file of `repo_id` in the local cache (refs/main's snapshot first), or None."""
    cache = hub_cache_dir()
    try:
        from huggingface_hub import try_to_load_from_cache  # noqa: PLC0415 - optional: not in the core install
    except ImportError:
        pass
    else:
        found = try_to_load_from_cache(repo_id, filename, cache_dir=cache)
        if isinstance(found, str):
            return Path(found)
    for snap in snapshots(repo_id, cache):
        if (snap / filename).is_file():
            return snap / filename
    return None


@dataclass(frozen=True)
class Fetched:
    """A file as the hub served it: its bytes, and where it now is in the cache (None: kept in memory)."""

    data: bytes
    path: Path | None


class HubError(Exception):
    """The hub could not give the file: why, in a few words."""


def fetch_file(repo_id: str, filename: str) -> Fetched:
    """The file from the hub; a HubError says why it could not, after one try (huggingface_hub's own download
    retries for half a minute and logs each retry: a machine without the network would wait for nothing).
    With huggingface_hub installed the file is then kept in the cache, as its own download keeps it."""
    endpoint = (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    data = _fetch_plain(endpoint, repo_id, filename)
    try:
        from huggingface_hub import hf_hub_download  # noqa: PLC0415 - optional: not in the core install
    except ImportError:
        return Fetched(data, None)
    try:
        where = hf_hub_download(
            repo_id, filename, cache_dir=hub_cache_dir(), endpoint=endpoint, etag_timeout=TIMEOUT_S
        )
    except Exception:  # the file is in hand; keeping a copy in the cache is a courtesy
        return Fetched(data, None)
    return Fetched(data, Path(str(where)))


def _fetch_plain(endpoint: str, repo_id: str, filename: str) -> bytes:
    """The file's bytes over HTTPS, one try."""
    url = f"{endpoint}/{repo_id}/resolve/main/{filename}"
    headers = {"User-Agent": "servelab"}
    if os.environ.get("HF_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['HF_TOKEN']}"
    # imported here: urllib.request loads http.client and ssl, start-up time every command that reads a
    # model config would pay, where most name an embedded one
    import urllib.error  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S) as r:
            data = r.read(MAX_FILE_BYTES + 1)
    except urllib.error.HTTPError as e:
        raise HubError(f"{url}: HTTP {e.code}") from e
    except (urllib.error.URLError, OSError) as e:
        raise HubError(f"{url}: {getattr(e, 'reason', e)}") from e
    if len(data) > MAX_FILE_BYTES:
        raise HubError(f"{url}: more than {MAX_FILE_BYTES >> 20} MiB")
    return data
