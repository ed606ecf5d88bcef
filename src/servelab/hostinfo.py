"""What this machine's CPU is, read only. Standard library only: scripts/device_vllm/host_speed.py imports it
on a device host before servelab's dependencies are unpacked."""

import platform


def cpu_model() -> str:
    """This machine's CPU model (/proc/cpuinfo on Linux, else what the platform says), or "unknown"."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
