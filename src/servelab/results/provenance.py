"""Where a run came from: servelab version and git sha, host, GPU and driver, the server's argv and env.

Secrets never reach the store: env values and argv values are redacted by servelab.redact's one rule
(secret names such as HF_TOKEN, DB_PASS or --api-key, URL user info, bearer tokens, token shapes).
"""

import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import servelab
from servelab.gpuinfo import nvidia_smi
from servelab.redact import REDACTED, is_secret_name, redact_argv, redact_env, redact_url

__all__ = [
    "REDACTED",
    "Provenance",
    "collect",
    "git_sha",
    "gpu_and_driver",
    "is_secret_name",
    "redact_argv",
    "redact_env",
    "redact_url",
]


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
