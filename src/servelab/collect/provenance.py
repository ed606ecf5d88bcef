"""provenance.json: what the tables were measured on and how, with no hostname in it."""

import datetime
import platform
import sys

from servelab import __version__, gpuinfo

SMI_FIELDS = "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,power.limit,temperature.gpu"


def nvidia_smi() -> list[dict] | None:
    """One dict per GPU with SMI_FIELDS, or None without nvidia-smi."""
    return gpuinfo.nvidia_smi(SMI_FIELDS)


def command_line(argv: list[str] | None = None) -> str:
    argv = list(sys.argv if argv is None else argv)
    if argv:
        argv[0] = (
            "servelab"
            if argv[0].endswith("servelab") or "servelab" in argv[0]
            else argv[0].rsplit("/", 1)[-1]
        )
    return " ".join(argv)


def base(system: str, executor: str, env: dict) -> dict:
    return {
        "system": system,
        "servelab": __version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command_line(),
        "executor": executor,
        "env": env,
        "timing_method": "random inputs; rotating input sets >= 256 MiB per replay; op captured N times in "
        "one CUDA graph (~2 ms replay); CUDA events per replay; 3 warm-up replays; median, p10, p90 over "
        "15-100 replays, per op call",
    }
