"""What nvidia-smi says about this machine's GPUs: read only (an argv list; clocks are never changed)."""

import shutil
import subprocess


def nvidia_smi(fields: str) -> list[dict[str, str]] | None:
    """One dict per GPU of the comma-separated `fields` (nvidia-smi --query-gpu names); None without
    nvidia-smi or when it fails."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    names = fields.split(",")
    return [
        dict(zip(names, (v.strip() for v in line.split(",")), strict=False))
        for line in out.strip().splitlines()
        if line
    ]
