"""Where a run came from: servelab version and git sha, host, GPU and driver, the server's argv and env.

Secrets never reach the store: env values whose key contains KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL
are replaced, `user:pass@` is stripped from every URL, and argv values of flags named like a secret
(`--api-key X`, `--hf-token=X`) are replaced too. Flags match by whole word, so
`--max-num-batched-tokens 8192` is kept.
"""

import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import servelab
from servelab.gpuinfo import nvidia_smi

REDACTED = "<redacted>"
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")


@dataclass(frozen=True)
class Provenance:
    servelab_version: str | None = servelab.__version__  # None: measured by another tool, then imported
    git_sha: str | None = None
    recipe_fingerprint: str | None = None
    image_digest: str | None = None
    server_argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    gpu: str | None = None
    driver: str | None = None
    host: str | None = None


def redact_url(text: str) -> str:
    """Drop the `user:pass@` part of every URL in text."""
    return _URL_USERINFO.sub(r"\1", text)


def is_secret_key(key: str) -> bool:
    upper = key.upper()
    return any(word in upper for word in SECRET_WORDS)


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: REDACTED if is_secret_key(k) else redact_url(str(v)) for k, v in env.items()}


def _is_secret_flag(flag: str) -> bool:
    words = re.split(r"[-_]+", flag.lstrip("-").upper())
    return any(word in SECRET_WORDS for word in words) or "APIKEY" in words


def redact_argv(argv: list[str]) -> list[str]:
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            out.append(REDACTED)
        elif arg.startswith("-") and "=" in arg and _is_secret_flag(arg.split("=", 1)[0]):
            out.append(arg.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(redact_url(arg))
        hide_next = arg.startswith("-") and "=" not in arg and _is_secret_flag(arg)
    return out


def gpu_and_driver() -> tuple[str | None, str | None]:
    """GPU names (`8x NVIDIA H200`) and driver version from nvidia-smi; (None, None) where it is absent."""
    rows = nvidia_smi("name,driver_version")
    if not rows:
        return None, None
    names = sorted({r["name"] for r in rows})
    gpu = ", ".join(f"{sum(r['name'] == n for r in rows)}x {n}" for n in names)
    return gpu, rows[0].get("driver_version")


def git_sha() -> str | None:
    """The commit of the servelab source tree when it runs from a git checkout."""
    exe = shutil.which("git")
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, "-C", str(Path(servelab.__file__).parent), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (subprocess.SubprocessError, OSError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else None


def collect(
    server_argv: list[str] | None = None,
    env: dict[str, str] | None = None,
    recipe_fingerprint: str | None = None,
    image_digest: str | None = None,
) -> Provenance:
    """Provenance of a run on this machine, secrets redacted; never fails for a missing git or nvidia-smi."""
    gpu, driver = gpu_and_driver()
    return Provenance(
        git_sha=git_sha(),
        recipe_fingerprint=recipe_fingerprint,
        image_digest=image_digest,
        server_argv=redact_argv(server_argv or []),
        env=redact_env(env or {}),
        gpu=gpu,
        driver=driver,
        host=socket.gethostname(),
    )
